"""Time tiled variants of the CUDA package with parts of the loop compiled out, on one GPU.

    python3 kernels/packages/sparse_mla_decode_cuda/tuning/ablate.py "" ABL_NO_LOAD ABL_TIMING ...

Each argument is a comma-separated list of defines (``""``: none); for each, five configurations
(V3.2 batch 64 head_tiled, V3.2 batch 32 split 2, V4-Flash batch 64 split 2 and head_tiled,
V4-Flash batch 32 split 4) are built with nvcc and timed as the bench does (CUDA graph over six
rotated input sets); ``--seesaw`` runs the same points with the seesaw schedule (12 warps; its
measurement defines are SS_NO_LOAD, ABL_NO_QK, ABL_NO_PV, SS_NO_PREFETCH). A build with no ``ABL_``
or ``SS_`` define (none, or a candidate such as ``FUSED_COMBINE``) is meant to be right, so its
output on the second input set is checked against the reference (max abs error and the number of
elements outside the manifest's tolerance, atol + rtol·|ref|). With ``ABL_TIMING`` the head_tiled runs also print block (0, 0)'s SM clocks
per tile and phase for each warp group. The outputs are wrong with any ``ABL_`` define: these
numbers say where the loop's time goes, they are not results.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import torch
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from kernels.runner.package import load_package
from kernels.runner.build import nvcc_argv, find_tool
pkg = load_package(Path(__file__).resolve().parents[1])
mod = pkg.load_module("harness.py")
nvcc = find_tool("nvcc")
WORK = Path(tempfile.mkdtemp(prefix="ceiling-ablate-"))
source = "".join((pkg.root / name).read_text() for name in ("kernel.cu", "tiled_sm90.cuh", "seesaw_sm90.cuh", "wgmma_sm90.cuh"))
seesaw = "--seesaw" in sys.argv
extra = [a for a in sys.argv[1:] if a != "--seesaw"] or [""]
cases = [("v32", 64, dict(impl="head_tiled", BLOCK_N=64, num_warps=8, VEC=8, STAGES=2, NUM_SPLITS="auto")),
         ("v32", 32, dict(impl="split_k", BLOCK_N=64, num_warps=8, VEC=8, STAGES=2, NUM_SPLITS=2)),
         ("v4-flash", 64, dict(impl="split_k", BLOCK_N=64, num_warps=8, VEC=8, STAGES=2, NUM_SPLITS=2)),
         ("v4-flash", 64, dict(impl="head_tiled", BLOCK_N=64, num_warps=8, VEC=8, STAGES=2, NUM_SPLITS="auto")),
         ("v4-flash", 32, dict(impl="split_k", BLOCK_N=64, num_warps=8, VEC=8, STAGES=2, NUM_SPLITS=4))]
if seesaw:   # the same points with the seesaw schedule (12 warps, whole tile pairs per split)
    cases = [(n, b, dict(p, num_warps=12, STAGES=2, BLOCK_N=64)) for n, b, p in cases]
def build(params, fl):
    """The cubin of ``params`` with the extra defines ``fl`` (one per parameters, defines and
    source text, in this run's own directory); None after printing nvcc's error."""
    key = hashlib.sha256(json.dumps([params, fl, source], sort_keys=True).encode()).hexdigest()[:16]
    cub = WORK / f"{key}.cubin"
    argv = nvcc_argv(pkg, params, 90, nvcc, cub)
    argv = argv[:-3] + [f"-D{f}" for f in fl] + argv[-3:]
    if not cub.exists():
        r = subprocess.run(argv, capture_output=True, text=True, cwd=pkg.root)
        if r.returncode:
            print(r.stderr[-1500:])
            return None
    return cub


jobs = [(params, [f for f in flags.split(",") if f]) for flags in extra for _, _, params in cases]
with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:   # compile everything first, in parallel
    cubins = list(pool.map(lambda job: build(*job), jobs))
sets = {}
for i, (flags, (shape_name, batch, params)) in enumerate((f, c) for f in extra for c in cases):
    fl = [f for f in flags.split(",") if f]
    cub = cubins[i]
    if cub is not None:
        key = (shape_name, batch)
        if key not in sets:
            sets[key] = mod.make_rotation(pkg.shape(shape_name), batch, "cuda", 0, 6)
        p = dict(params, cubin=str(cub))
        for x in sets[key]: mod.launch(p, x)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for x in sets[key]: mod.launch(p, x)
        g.replay(); torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(20): g.replay()
        e1.record(); torch.cuda.synchronize()
        us = e0.elapsed_time(e1) * 1e3 / 20 / len(sets[key])
        if "ABL_TIMING" in fl and params["impl"] == "head_tiled":
            ph = sets[key][0]["out"].view(torch.int64).flatten()[:16].tolist()
            names = {0: ["wait q/tile", "barrier", "q.k issue", "q.k wait", "max", "P + barrier", "rescale + p.v"],
                     1: ["wait tile", "barrier", "gather issue", "-", "-", "barrier", "rescale + p.v"]}
            for w in (0, 1):
                n = max(ph[8 * w + 7], 1)
                print(f"   warp group {w}, block 0, {n} tiles, clocks per tile: " +
                      ", ".join(f"{nm} {ph[8 * w + i] / n:.0f}" for i, nm in enumerate(names[w]) if nm != "-"), flush=True)
        if "SS_TIMING" in fl and params["impl"] == "head_tiled":
            ph = sets[key][0]["out"].view(torch.int64).flatten()[:27].tolist()
            names = {0: ["q.k0", "max, m0", "P0, p.v0L issue", "wait m1/P1", "store P0", "wait p.v0L", "p.v1L issue",
                         "wait p.v1L"],
                     1: ["q.k1", "mask, max", "wait m0", "P1, store, p.v1R issue", "wait P0", "p.v0R issue",
                         "wait p.v1R", "wait p.v0R"]}
            for w in (0, 1):
                n = max(ph[9 * w + 8], 1)
                print(f"   warp group {w}, block 0, {n} pairs, clocks per pair: " +
                      ", ".join(f"{nm} {ph[9 * w + i] / n:.0f}" for i, nm in enumerate(names[w])), flush=True)
            producer = ["wait empty K0L", "issue K0L", "wait empty K1R", "issue K1R", "wait empty K0R", "issue K0R",
                        "wait empty K1L", "issue K1L", "next ids + L2 prefetch"]
            n = max(ph[17], 1)
            print(f"   producer, block 0, clocks per pair: " +
                  ", ".join(f"{nm} {ph[18 + i] / n:.0f}" for i, nm in enumerate(producer)), flush=True)
        check = ""
        if not any(f.startswith(("ABL_", "SS_")) for f in fl):   # a build meant to be right: check it
            x = sets[key][1]
            x["out"].zero_()
            got = mod.launch(p, x).float()
            ref = pkg.load_module("reference.py").reference(x).float()
            err = (got - ref).abs()
            bad = int((err > pkg.tolerance["atol"] + pkg.tolerance["rtol"] * ref.abs()).sum())
            check = f"  max abs err {float(err.max()):.4f}, {bad} outside tolerance"
        print(f"{flags or 'full':28s} {shape_name:9s} b{batch:<3d} {params['impl']:10s} S{params['NUM_SPLITS']!s:5s} {us:8.1f} us{check}", flush=True)
