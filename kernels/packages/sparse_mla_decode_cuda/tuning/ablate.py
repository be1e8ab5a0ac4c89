import sys, subprocess, torch
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from kernels.runner.package import load_package
from kernels.runner.build import nvcc_argv, find_tool
pkg = load_package(Path(__file__).resolve().parents[1])
mod = pkg.load_module("harness.py")
nvcc = find_tool("nvcc")
extra = sys.argv[1:] or [""]
cases = [("v32", 64, dict(impl="head_tiled", BLOCK_N=64, num_warps=8, VEC=8, STAGES=2, NUM_SPLITS="auto")),
         ("v32", 32, dict(impl="split_k", BLOCK_N=64, num_warps=8, VEC=8, STAGES=2, NUM_SPLITS=2)),
         ("v4-flash", 64, dict(impl="split_k", BLOCK_N=64, num_warps=8, VEC=8, STAGES=2, NUM_SPLITS=2)),
         ("v4-flash", 64, dict(impl="head_tiled", BLOCK_N=64, num_warps=8, VEC=8, STAGES=2, NUM_SPLITS="auto")),
         ("v4-flash", 32, dict(impl="split_k", BLOCK_N=64, num_warps=8, VEC=8, STAGES=2, NUM_SPLITS=4))]
sets = {}
for flags in extra:
    fl = [f for f in flags.split(",") if f]
    for shape_name, batch, params in cases:
        cub = Path(f"/tmp/a_{params['impl']}_{'_'.join(fl)}.cubin")
        argv = nvcc_argv(pkg, params, 90, nvcc, cub)
        argv = argv[:-3] + [f"-D{f}" for f in fl] + argv[-3:]
        if not cub.exists():
            r = subprocess.run(argv, capture_output=True, text=True, cwd=pkg.root)
            if r.returncode: print(r.stderr[-1500:]); continue
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
        print(f"{flags or 'full':28s} {shape_name:9s} b{batch:<3d} {params['impl']:10s} S{params['NUM_SPLITS']!s:5s} {us:8.1f} us", flush=True)
