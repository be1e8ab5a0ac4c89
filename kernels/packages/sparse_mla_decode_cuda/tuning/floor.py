"""How close to the roofline can any sparse MLA decode kernel get? Times kernels that only move
bytes (``floor.cu``, no arithmetic) on the bench's inputs, on one GPU.

    python3 kernels/packages/sparse_mla_decode_cuda/tuning/floor.py [--step] [v4-flash:32 v32:64 ...]

For each point (default: both shapes at batch 8, 32 and 64) it builds the same rotated input sets
as ``python -m kernels.runner bench`` (cold L2), times the row-only kernel (``gather_floor``, 4 or
8 rows in flight a warp, and the ``cp.async`` kernels, as many bytes in flight as a shared-memory
ring holds; with ``--step`` also ``step_floor*``, which move every byte the manifest's ``[cost]``
counts: the rows, q in and the output out) with the bench's CUDA-graph loop over block sizes,
block widths, ring shapes and PDL on/off (``configs``), and prints the fastest of each, its
effective bandwidth over the bytes it moves, and the roofline time (manifest cost formulas, the H200 job's ceilings 4274
GB/s and 789 TFLOP/s) over that floor: no kernel that moves those bytes can exceed that fraction
of the roofline, and a kernel that reaches a given fraction must finish within the printed time.
Needs nvcc and a CUDA GPU of cc 9.0 or later.
"""
import ctypes
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from kernels.runner import bench  # noqa: E402
from kernels.runner.build import find_tool  # noqa: E402
from kernels.runner.package import load_package  # noqa: E402

HBM_GBPS, BF16_TFLOPS = 4274.0, 789.0   # the stored H200 job's measured ceilings (results/h200-results.json)

pkg = load_package(Path(__file__).resolve().parents[1])
harness = pkg.load_module("harness.py")
cubin = Path(tempfile.mkdtemp(prefix="ceiling-floor-")) / "floor.cubin"
major, minor = torch.cuda.get_device_capability(0)
arch = f"{major}{minor}"
subprocess.run([find_tool("nvcc"), "-cubin", "-O3", "-gencode", f"arch=compute_{arch},code=sm_{arch}",
                str(Path(__file__).with_name("floor.cu")), "-o", str(cubin)], check=True)
device = bench.device_facts(torch, 0)
bench.time_launches.__defaults__ = (0.02,)
sink = torch.zeros(4, dtype=torch.int32, device="cuda")
args = [a for a in sys.argv[1:] if a != "--step"]
kinds = ["rows only"] + (["rows, q and out"] if "--step" in sys.argv[1:] else [])
points = [(p.rpartition(":")[0], int(p.rpartition(":")[2])) for p in args] or \
    [(s, b) for s in ("v4-flash", "v32") for b in (8, 32, 64)]
SMEM_LIMIT = 232448   # the most dynamic shared memory a block may opt into on sm_90 (227 KiB)


def configs(step: bool, topk: int, chunks: int, q_chunks: int):
    """(kernel name, rows a block, threads, PDL, extra int arguments, dynamic shared bytes) to try:
    the register kernels (4 or 8 rows in flight a warp) over 8 block sizes x 2 widths x PDL on/off,
    and the cp.async kernels over 5 block sizes x 2 widths x 5 ring shapes (PDL on)."""
    prefix = "step_floor" if step else "gather_floor"
    for fname in (prefix, prefix + "8"):
        for per_block in (32, 64, 80, 160, 320, 640, 1024, 2048):
            for threads in (256, 512):
                for pdl in (False, True):
                    if per_block <= topk:
                        yield fname, per_block, threads, pdl, [], 0
    for per_block in (64, 80, 160, 320, 640):
        for threads in (256, 512):
            for stages, group_rows in ((4, 16), (8, 16), (12, 8), (8, 8), (4, 32)):
                splits = math.ceil(topk / per_block)
                q_share = math.ceil(q_chunks / splits) if step else 0
                smem = (per_block * 4 + 15) // 16 * 16 + (stages * group_rows * chunks + q_share) * 16
                if per_block <= topk and smem <= SMEM_LIMIT:
                    yield f"{prefix}_async{stages}", per_block, threads, True, [group_rows], smem


for name, batch in points:
    shape = pkg.shape(name)
    nbytes, flops = pkg.cost_of(shape, batch)
    roofline_us = max(nbytes / (HBM_GBPS * 1e3), flops / (BF16_TFLOPS * 1e6))
    sets = bench.make_sets(harness, shape, batch, bench.rotation_copies(nbytes, device["l2_bytes"]), 0)
    topk, chunks = int(shape["topk"]), int(shape["d_qk"]) * 2 // 16
    heads, d_qk, d_v = int(shape["heads"]), int(shape["d_qk"]), int(shape["d_v"])
    q_chunks, o_chunks = heads * d_qk * 2 // 16, heads * d_v * 2 // 16
    for label in kinds:
        step = label != "rows only"
        best = None
        for fname, per_block, threads, pdl, extra, smem in configs(step, topk, chunks, q_chunks):
            fn = harness._function(str(cubin), fname, smem)

            def run_one(inputs, fn=fn, per_block=per_block, threads=threads, pdl=pdl, step=step, extra=extra,
                        smem=smem):
                ptrs = [inputs["kv"], inputs["indices"]] + ([inputs["q"], inputs["out"]] if step else [])
                if not step and not extra:
                    ptrs.append(sink)
                ints = [topk, chunks, per_block] + extra + ([q_chunks, o_chunks] if step else [])
                harness._launch(fn, (math.ceil(topk / per_block), batch), threads, smem,
                                torch.cuda.current_stream().cuda_stream,
                                ptrs + [ctypes.c_int(v) for v in ints], pdl=pdl)
            us = statistics.median(bench.time_launches(torch, run_one, sets)["samples_us"])
            if best is None or us < best[0]:
                best = (us, per_block, threads, pdl, fname + (f" groups of {extra[0]} rows" if extra else ""))
        moved = batch * topk * d_qk * 2 + (batch * heads * (d_qk + d_v) * 2 if step else 0)
        print(f"{name} b{batch}: {label} {best[0]:.2f} us ({moved / best[0] / 1e3:.0f} GB/s; {best[4]}, {best[1]} "
              f"rows a block, {best[2]} threads, PDL {best[3]}); roofline {roofline_us:.2f} us -> at most "
              f"{roofline_us / best[0] * 100:.0f}% of the roofline (70% needs {roofline_us / 0.7:.2f} us)", flush=True)
    del sets
    torch.cuda.empty_cache()
