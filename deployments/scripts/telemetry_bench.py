"""Sampler cost: CPU time per sample of each telemetry source, in µs.

Modes (several may be given; default ``--host --scrape``):

``--nvml``    (on a GPU host, no Django) full readings of every GPU through
              :class:`deployments.telemetry.gpu.NvmlGpuReader` at the highest rate, per
              GPU-sample, plus the cost of each NVML call the reader makes;
``--host``    :class:`deployments.telemetry.host.HostSampler`: per-CPU times, NUMA and pinned-set
              utilisation, memory, load, and the CPU/RSS of a process tree (this process);
``--scrape``  a real ``sim`` engine process (started here as the tests start it) scraped,
              parsed with ``prometheus_client`` and normalised
              (:class:`deployments.telemetry.engine.MetricsScraper`), per process-sample;
``--sampler`` the whole :class:`deployments.telemetry.sampler.NodeSampler` without GPUs at
              ``--hz`` (default 10): rows from a scratch SQLite database, one real ``sim``
              process, broadcasts to the real Redis, history writes (needs Django and Redis).

Each figure is ``time.process_time`` of this process over ``--samples`` iterations divided by
the iterations; the target is to sample 8 GPUs at 10 Hz in at most 2 % of one core of the GPU
host (20 ms of CPU per second).

Usage::

    .venv/bin/python deployments/scripts/telemetry_bench.py [--host] [--scrape] [--sampler] [--samples 2000]
    python3 deployments/scripts/telemetry_bench.py --nvml          # on the GPU host
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def per_call_us(fn, n: int) -> float:
    """CPU µs per call of ``fn`` over ``n`` calls (after one warm-up call)."""
    fn()
    t0 = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - t0) / n * 1e6


def paced_us(fn, hz: float, seconds: float) -> float:
    """CPU µs per call of ``fn`` called at ``hz`` for ``seconds`` (sleeping in between, as the
    sampler does: colder caches than back-to-back calls, so usually a higher figure)."""
    n = max(1, int(hz * seconds))
    fn()
    t0 = time.process_time()
    next_at = time.monotonic()
    for _ in range(n):
        fn()
        next_at += 1.0 / hz
        time.sleep(max(0.0, next_at - time.monotonic()))
    return (time.process_time() - t0) / n * 1e6


def bench_nvml(samples: int, paced_hz: float = 0.0) -> None:
    from deployments.telemetry.gpu import NvmlGpuReader

    reader = NvmlGpuReader()
    status = reader.open()
    print(f"NVML: {status}; GPUs: {reader.gpu_count}")
    if status != "ok" or not reader.gpu_count:
        return
    full = per_call_us(reader.read, samples)
    per_gpu = full / reader.gpu_count
    print(f"nvml: {per_gpu:.1f} µs CPU per GPU-sample ({full:.1f} µs per reading of {reader.gpu_count} GPU(s), "
          f"{samples} readings); 8 GPUs at 10 Hz = {per_gpu * 80 / 1e4:.2f}% of one core")
    if paced_hz:
        paced = paced_us(reader.read, paced_hz, 5.0) / reader.gpu_count
        print(f"nvml paced at {paced_hz:g} Hz for 5 s: {paced:.1f} µs CPU per GPU-sample; 8 GPUs at 10 Hz = "
              f"{paced * 80 / 1e4:.2f}% of one core")
        # A host with 8 GPUs reads 8 devices per tick: the first call of a tick pays for cold
        # caches, the others much less. With fewer GPUs here, the tick reads them again until
        # 8 device readings are done.
        repeat = max(1, 8 // reader.gpu_count)

        def tick() -> None:
            for _ in range(repeat):
                reader.read()

        per = paced_us(tick, paced_hz, 5.0) / (repeat * reader.gpu_count)
        print(f"nvml paced at {paced_hz:g} Hz, 8 device readings per tick: {per:.1f} µs CPU per GPU-sample; "
              f"8 GPUs at 10 Hz = {per * 80 / 1e4:.2f}% of one core")
    nvml = reader._nvml
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    calls = {
        "nvmlDeviceGetMemoryInfo(v2)": lambda: nvml.nvmlDeviceGetMemoryInfo(h, version=nvml.nvmlMemory_v2),
        "nvmlDeviceGetUtilizationRates": lambda: nvml.nvmlDeviceGetUtilizationRates(h),
        "nvmlDeviceGetPowerUsage": lambda: nvml.nvmlDeviceGetPowerUsage(h),
        "nvmlDeviceGetTemperature": lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU),
        "nvmlDeviceGetClockInfo(SM)": lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM),
        "nvmlDeviceGetComputeRunningProcesses": lambda: nvml.nvmlDeviceGetComputeRunningProcesses(h),
        "nvmlDeviceGetGraphicsRunningProcesses": lambda: nvml.nvmlDeviceGetGraphicsRunningProcesses(h),
        "nvmlDeviceGetMigMode": lambda: nvml.nvmlDeviceGetMigMode(h),
        "nvmlDeviceGetPowerManagementLimit": lambda: nvml.nvmlDeviceGetPowerManagementLimit(h),
    }

    def guarded(fn):
        def run():
            try:
                fn()
            except nvml.NVMLError:
                pass
        return run

    for name, fn in calls.items():
        print(f"  {name:<40} {per_call_us(guarded(fn), max(200, samples // 4)):8.1f} µs")
    reader.close()


def bench_host(samples: int, paced_hz: float = 0.0) -> None:
    from deployments.telemetry.host import HostSampler, ProcessTreeSampler

    cpus = os.sched_getaffinity(0)
    host = HostSampler(numa_cpus={"0": sorted(cpus)})
    trees = ProcessTreeSampler()
    pinned = {"self": sorted(cpus)[:1]}
    host.sample(pinned_sets=pinned)

    def one() -> None:
        host.sample(pinned_sets=pinned)

    def tree() -> None:
        trees.sample({1: os.getpid()})

    print(f"host: {per_call_us(one, samples):.1f} µs CPU per host sample "
          f"(per-CPU times, {len(cpus)} CPUs, 1 NUMA node, 1 pinned set, memory, load)")
    print(f"process tree: {per_call_us(tree, samples):.1f} µs CPU per process-sample "
          f"(this process's tree; membership rescanned every {trees.rescan_s:g} s)")
    if paced_hz:
        print(f"host paced at {paced_hz:g} Hz for 5 s: {paced_us(one, paced_hz, 5.0):.1f} µs CPU per host sample; "
              f"process tree: {paced_us(tree, paced_hz, 5.0):.1f} µs per process-sample")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench_scrape(samples: int) -> None:
    import httpx

    from deployments.telemetry.engine import MetricsScraper, ScrapeTarget

    port = _free_port()
    log = open(os.devnull, "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "deployments.engines.sim_server", "--role", "single", "--host", "127.0.0.1",
         "--port", str(port), "--model-name", "sim-model", "--profile", "demo-fast"],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        httpx.post(f"{base}/generate", json={"text": "hello", "sampling_params": {"max_new_tokens": 8,
                                                                                 "ignore_eos": True}}, timeout=30)
        for count in (1, 8):
            scraper = MetricsScraper(min_period_s=0.0)
            targets = [ScrapeTarget(key=k, url=f"{base}/metrics", engine="sim", identity=(proc.pid, 0))
                       for k in range(count)]
            try:
                scraper.scrape_now(targets)
                t0, w0 = time.process_time(), time.perf_counter()
                for _ in range(samples):
                    scraper.scrape_now(targets)
                cpu, wall = time.process_time() - t0, time.perf_counter() - w0
                result = scraper.latest(0)
            finally:
                scraper.close()
            print(f"scrape ({count} process(es) per round): {cpu / samples / count * 1e6:.1f} µs CPU per "
                  f"process-sample in this process (HTTP GET + prometheus_client parse + normalise of the sim's "
                  f"/metrics), {wall / samples * 1e3:.2f} ms wall per round; last: running={result.running} "
                  f"queued={result.queued} generation_tokens_total={result.generation_tokens_total}")
    finally:
        proc.kill()
        proc.wait(timeout=10)
        log.close()


def bench_sampler(samples: int, hz: float) -> None:
    """The whole sampler without GPUs (NVML's share comes from ``--nvml`` on the GPU host): one
    real ``sim`` engine as a deployment's process, rows in a scratch SQLite database, broadcasts
    to the real Redis, 1 s rollups written every 5 s."""
    import tempfile

    tmp = tempfile.mkdtemp(prefix="telemetry-bench-")
    os.environ["DATABASE_URL"] = f"sqlite:///{tmp}/bench.sqlite3"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from deployments.models import Deployment, Node, NumaNode, Recipe, ServerProcess
    from deployments.supervisor.procfs import proc_start_ticks
    from deployments.telemetry.sampler import NodeSampler

    call_command("migrate", verbosity=0)
    node = Node.objects.create(name="bench-node", cpu_count=os.cpu_count() or 1)
    NumaNode.objects.create(node=node, index=0, cpus=f"0-{(os.cpu_count() or 1) - 1}")
    recipe = Recipe.objects.create(name="bench", engine="sim", topology="single", node=node)
    deployment = Deployment.objects.create(recipe=recipe, recipe_version=1, node=node, status="ready")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "deployments.engines.sim_server", "--role", "single", "--host", "127.0.0.1",
         "--port", str(port), "--model-name", "sim-model", "--profile", "demo-fast"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        time.sleep(1.5)
        ServerProcess.objects.create(deployment=deployment, role="single", status="ready", pid=proc.pid,
                                     start_ticks=proc_start_ticks(proc.pid), cpus="0", effective_cpus="0",
                                     ports={"http": port}, health_url=f"http://127.0.0.1:{port}/health")
        sampler = NodeSampler(node_name=node.name, hz=hz, nvml=None, nvidia_smi=None)
        interval = 1.0 / hz
        sampler.sample_once()
        t0, w0 = time.process_time(), time.perf_counter()
        next_at = time.monotonic()
        for _ in range(samples):
            sampler.sample_once()
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
        cpu, wall = time.process_time() - t0, time.perf_counter() - w0
        sampler.close()
        per = cpu / samples * 1e6
        print(f"sampler (no GPUs, 1 sim process, broadcasts + history): {per:.0f} µs CPU per sample at {hz:g} Hz "
              f"over {wall:.1f} s = {per * hz / 1e4:.2f}% of one core; history rows written: "
              f"{sampler.history.rows_written}")
    finally:
        proc.kill()
        proc.wait(timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvml", action="store_true")
    parser.add_argument("--host", action="store_true")
    parser.add_argument("--scrape", action="store_true")
    parser.add_argument("--sampler", action="store_true")
    parser.add_argument("--hz", type=float, default=10.0, help="rate of --sampler")
    parser.add_argument("--paced", type=float, default=0.0, metavar="HZ",
                        help="also measure --nvml and --host called at this rate (sleeping in between)")
    parser.add_argument("--samples", type=int, default=2000)
    args = parser.parse_args()
    if not (args.nvml or args.host or args.scrape or args.sampler):
        args.host = args.scrape = True
    if args.nvml:
        bench_nvml(args.samples, args.paced)
    if args.host:
        bench_host(args.samples, args.paced)
    if args.scrape:
        bench_scrape(max(50, args.samples // 10))
    if args.sampler:
        bench_sampler(max(20, args.samples // 20), args.hz)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
