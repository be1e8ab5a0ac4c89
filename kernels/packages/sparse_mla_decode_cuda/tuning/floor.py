"""How close to the roofline can any sparse MLA decode kernel get? Times a kernel that only reads
the selected rows (``floor.cu``: no q, no arithmetic, no output) on the bench's inputs, on one GPU.

    python3 kernels/packages/sparse_mla_decode_cuda/tuning/floor.py [v4-flash:32 v32:64 ...]

For each point (default: both shapes at batch 8, 32 and 64) it builds the same rotated input sets
as ``python -m kernels.runner bench`` (cold L2), times the row-only kernel with the bench's
CUDA-graph loop over 8 block sizes x 2 block widths x PDL on/off and prints the fastest, its
effective bandwidth over the rows' bytes, and the roofline time (manifest cost formulas, the
H200 job's ceilings 4274 GB/s and 789 TFLOP/s) over that floor: no kernel that reads every row
can exceed that fraction of the roofline. Needs nvcc and a CUDA GPU of cc 9.0 or later.
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
fn = harness._function(str(cubin), "gather_floor", 0)
points = [(p.rpartition(":")[0], int(p.rpartition(":")[2])) for p in sys.argv[1:]] or \
    [(s, b) for s in ("v4-flash", "v32") for b in (8, 32, 64)]
for name, batch in points:
    shape = pkg.shape(name)
    nbytes, flops = pkg.cost_of(shape, batch)
    roofline_us = max(nbytes / (HBM_GBPS * 1e3), flops / (BF16_TFLOPS * 1e6))
    sets = bench.make_sets(harness, shape, batch, bench.rotation_copies(nbytes, device["l2_bytes"]), 0)
    topk, chunks = int(shape["topk"]), int(shape["d_qk"]) * 2 // 16
    best = None
    for per_block in (32, 64, 80, 160, 320, 640, 1024, 2048):
        if per_block > topk:
            continue
        for threads in (256, 512):
            for pdl in (False, True):
                def run_one(inputs, per_block=per_block, threads=threads, pdl=pdl):
                    harness._launch(fn, (math.ceil(topk / per_block), batch), threads, 0,
                                    torch.cuda.current_stream().cuda_stream,
                                    [inputs["kv"], inputs["indices"], sink, ctypes.c_int(topk), ctypes.c_int(chunks),
                                     ctypes.c_int(per_block)], pdl=pdl)
                us = statistics.median(bench.time_launches(torch, run_one, sets)["samples_us"])
                if best is None or us < best[0]:
                    best = (us, per_block, threads, pdl)
    rows_bytes = batch * topk * int(shape["d_qk"]) * 2
    print(f"{name} b{batch}: rows only {best[0]:.2f} us ({rows_bytes / best[0] / 1e3:.0f} GB/s; {best[1]} rows a "
          f"block, {best[2]} threads, PDL {best[3]}); roofline {roofline_us:.2f} us -> at most "
          f"{roofline_us / best[0] * 100:.0f}% of the roofline", flush=True)
    del sets
    torch.cuda.empty_cache()
