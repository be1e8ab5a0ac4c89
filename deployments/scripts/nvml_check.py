"""NVML check on a real GPU: the sampler's memory figures against ``nvidia-smi``.

Runs on a bare GPU host (no Django): it imports only :mod:`deployments.telemetry.gpu` and needs
``nvidia-ml-py`` (``pynvml``), ``nvidia-smi`` and PyTorch with CUDA for the allocation.

1. Idle: the sampler's per-GPU reading next to ``nvidia-smi --query-gpu=index,memory.used,
   memory.total,memory.reserved --format=csv,noheader,nounits``, plus NVML's v1 figure (which
   counts reserved memory as used) to show which one ``nvidia-smi`` matches.
2. A child process opens a CUDA context on GPU ``--gpu`` (reading taken), then allocates
   ``--gib`` GiB with ``torch.empty`` (reading taken). The GPU's and the child's memory from the
   sampler (NVML per-process list) are printed next to ``nvidia-smi --query-compute-apps=pid,
   used_memory``; the allocation shows up as the difference between the two readings.
3. Cost: ``time.process_time`` of this process over ``--samples`` full readings of every GPU at
   the highest rate, per GPU-sample, and what 8 GPUs at 10 Hz would cost in percent of one core.

Agreement rule: NVML bytes / MiB and ``nvidia-smi``'s MiB differ by less than 1 MiB (the tool
rounds down to whole MiB); the allocation appears as ``--gib`` × 1024 MiB, give or take the
allocator's 2 MiB rounding. Exit code 0 when every check holds, 1 otherwise.

Usage::

    python3 deployments/scripts/nvml_check.py [--gpu 0] [--gib 4] [--samples 2000] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from deployments.telemetry.gpu import MIB, NvmlGpuReader, NvidiaSmiGpuReader, parse_query_csv  # noqa: E402

CHILD = r"""
import json, sys, torch
dev = torch.device("cuda", 0)
torch.empty(1, device=dev); torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info(dev)
print(json.dumps({"stage": "context", "free": free, "total": total}), flush=True)
sys.stdin.readline()
x = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device=dev); torch.cuda.synchronize()
free2, _ = torch.cuda.mem_get_info(dev)
print(json.dumps({"stage": "allocated", "free": free2, "torch_reserved": torch.cuda.memory_reserved(dev)}), flush=True)
sys.stdin.readline()
"""


def smi(args: list[str]) -> str:
    exe = shutil.which("nvidia-smi")
    if not exe:
        raise SystemExit("nvidia-smi not found")
    return subprocess.run([exe, *args], capture_output=True, text=True, check=True, timeout=30).stdout


def smi_gpus() -> dict[int, dict[str, str]]:
    text = smi(["--query-gpu=index,memory.used,memory.total,memory.reserved", "--format=csv,noheader,nounits"])
    rows = parse_query_csv(text, ["index", "memory.used", "memory.total", "memory.reserved"])
    return {int(r["index"]): r for r in rows}


def smi_apps() -> dict[int, str]:
    text = smi(["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"])
    return {int(r["pid"]): r["used_memory"] for r in parse_query_csv(text, ["pid", "used_memory"])}


def mib(value: int | None) -> str:
    return "null" if value is None else f"{value / MIB:.2f}"


def agree(nvml_bytes: int | None, smi_mib: str) -> bool:
    try:
        return nvml_bytes is not None and abs(nvml_bytes / MIB - float(smi_mib)) < 1.0
    except ValueError:
        return False


def table(reader: NvmlGpuReader, gpu: int, label: str, report: dict, checks: list[tuple[str, bool]]) -> dict:
    reading = next(g for g in reader.read() if g["index"] == gpu)
    smi_row = smi_gpus()[gpu]
    mem = reading["memory"]
    handle = reader._nvml.nvmlDeviceGetHandleByIndex(gpu)
    v1 = reader._nvml.nvmlDeviceGetMemoryInfo(handle)
    print(f"\n[{label}] GPU {gpu} memory, MiB")
    print(f"  {'field':<10} {'sampler (NVML v2)':>18} {'nvidia-smi':>12} {'NVML v1':>10}  agree")
    for key, col, v1_value in (("used_bytes", "memory.used", v1.used), ("total_bytes", "memory.total", v1.total),
                               ("reserved_bytes", "memory.reserved", None)):
        ok = agree(mem[key], smi_row[col])
        checks.append((f"{label} {key} matches nvidia-smi", ok))
        print(f"  {key[:-6]:<10} {mib(mem[key]):>18} {smi_row[col]:>12} {mib(v1_value):>10}  {'yes' if ok else 'NO'}")
    print(f"  free       {mib(mem['free_bytes']):>18} {'':>12} {mib(v1.free):>10}")
    apps = smi_apps()
    procs = reading["processes"]
    print(f"  processes (sampler): {[(p['pid'], mib(p['used_bytes'])) for p in procs]}")
    print(f"  processes (nvidia-smi --query-compute-apps): {[(pid, used) for pid, used in apps.items()]}")
    for p in procs:
        if p["pid"] in apps:
            ok = agree(p["used_bytes"], apps[p["pid"]])
            checks.append((f"{label} pid {p['pid']} memory matches nvidia-smi", ok))
    report[label] = {"sampler": reading, "nvidia_smi": smi_row, "nvml_v1_used_bytes": int(v1.used),
                     "nvidia_smi_apps": apps}
    return reading


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--gib", type=float, default=4.0)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--json", default=None, help="write every reading here")
    args = parser.parse_args()

    reader = NvmlGpuReader()
    status = reader.open()
    print(f"NVML: {status}; GPUs: {reader.gpu_count}")
    if status != "ok" or reader.gpu_count == 0:
        return 1
    report: dict = {}
    checks: list[tuple[str, bool]] = []
    idle = table(reader, args.gpu, "idle", report, checks)
    print(f"  idle GPU: used {mib(idle['memory']['used_bytes'])} MiB, reserved "
          f"{mib(idle['memory']['reserved_bytes'])} MiB (reserved is not counted as used)")

    nbytes = int(args.gib * 1024**3)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(args.gpu), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(nbytes)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        ctx = json.loads(child.stdout.readline())
        with_ctx = table(reader, args.gpu, "context", report, checks)
        child.stdin.write("go\n")
        child.stdin.flush()
        alloc = json.loads(child.stdout.readline())
        with_alloc = table(reader, args.gpu, "allocated", report, checks)
    finally:
        if child.poll() is None:
            child.stdin.write("done\n")
            child.stdin.flush()
        child.wait(timeout=60)
    grew = with_alloc["memory"]["used_bytes"] - with_ctx["memory"]["used_bytes"]
    ctx_cost = with_ctx["memory"]["used_bytes"] - idle["memory"]["used_bytes"]
    torch_seen = ctx["free"] - alloc["free"]
    print(f"\nallocation of {args.gib:g} GiB = {nbytes / MIB:.0f} MiB: GPU used grew by {grew / MIB:.2f} MiB "
          f"(torch.cuda.mem_get_info saw {torch_seen / MIB:.2f} MiB); CUDA context cost {ctx_cost / MIB:.2f} MiB")
    checks.append(("allocation shows up within 2 MiB", abs(grew - nbytes) <= 2 * MIB))
    child_pid = child.pid
    before = {p["pid"]: p["used_bytes"] for p in with_ctx["processes"]}
    after = {p["pid"]: p["used_bytes"] for p in with_alloc["processes"]}
    if child_pid in after and before.get(child_pid) is not None and after[child_pid] is not None:
        proc_grew = after[child_pid] - before[child_pid]
        print(f"child pid {child_pid}: sampler {mib(before[child_pid])} MiB with its context, {mib(after[child_pid])} MiB "
              f"after the allocation (+{proc_grew / MIB:.2f} MiB); the GPU total also holds "
              f"{(ctx_cost - before[child_pid]) / MIB:.2f} MiB of the context that NVML does not charge to the process")
        checks.append(("the child's per-process memory grew by the allocation (±2 MiB)", abs(proc_grew - nbytes) <= 2 * MIB))
    else:
        print(f"child pid {child_pid} not in NVML's list {sorted(after)} (another pid namespace?)")

    fallback = NvidiaSmiGpuReader(executable=shutil.which("nvidia-smi") or "nvidia-smi", min_period_s=0)
    smi_reading = next((g for g in fallback.read() if g["index"] == args.gpu), None)
    print(f"\nnvidia-smi fallback reader: status {fallback.status}; "
          f"{json.dumps(smi_reading, sort_keys=True) if smi_reading else 'no reading'}")
    report["fallback"] = smi_reading

    reader.read()
    t0, w0 = time.process_time(), time.perf_counter()
    for _ in range(args.samples):
        reader.read()
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    per_gpu_us = cpu / (args.samples * reader.gpu_count) * 1e6
    share = per_gpu_us * 8 * 10 / 1e6 * 100
    print(f"\nsampler cost: {args.samples} readings of {reader.gpu_count} GPU(s): CPU {cpu:.3f} s, wall {wall:.3f} s; "
          f"{per_gpu_us:.1f} µs CPU per GPU-sample, {wall / args.samples * 1e6:.1f} µs wall per reading; "
          f"8 GPUs at 10 Hz = {share:.2f}% of one core")
    report["cost"] = {"samples": args.samples, "gpus": reader.gpu_count, "cpu_s": cpu, "wall_s": wall,
                      "cpu_us_per_gpu_sample": per_gpu_us, "pct_core_8gpu_10hz": share}
    reader.close()
    print("\nchecks:")
    for name, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    report["checks"] = [{"check": n, "ok": ok} for n, ok in checks]
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
