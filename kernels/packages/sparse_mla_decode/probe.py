"""Quick timing probe of candidate variants at a few shapes and batches, on one GPU.

    python3 kernels/packages/sparse_mla_decode/probe.py --variants candidates.json \\
        --points v4-flash:8,v4-flash:32,v32:64 --out probe.json [--seconds 0.02] [--jobs 16] \\
        [--package kernels/packages/sparse_mla_decode_cuda] [--define SIBLING_COMBINE ...]

``candidates.json`` is a runner variants file (``[{"variant_id", "params"}]``). For each point
(``shape:batch``) the probe builds the same rotated input sets as ``python -m kernels.runner
bench`` (so cold-L2 timing is the same), checks each variant against the reference and times it
with the runner's own CUDA-graph loop, only with a shorter timed window per variant (``--seconds``,
default 0.02 s instead of the bench's 0.05 s). It skips the ceiling calibration and the points
the final job would add. It writes every row (the bench's result fields) to ``--out`` after each
point and prints, per point, the fastest correct variants with their median in microseconds.
Compiles are spread over ``--jobs`` processes first (the runner's ``prepare_builds``: Triton
kernels and a CUDA package's cubins alike). ``--package`` probes another
package with the same shapes (default: this one). ``--define NAME`` (repeatable; a CUDA package
only) adds ``-DNAME`` to every nvcc build of the run, to set a candidate compile-time switch of the
source against a run without it.

The probe exists to choose the variants of the final job cheaply; its numbers are not stored
results (use the runner's ``bench`` for those).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kernels.runner import bench  # noqa: E402
from kernels.runner.package import load_package, load_variants  # noqa: E402

PACKAGE = Path(__file__).resolve().parent
# One -D define as nvcc takes it: a C identifier, optionally = a plain token.
DEFINE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(=[A-Za-z0-9_.]+)?")


def parse_points(text: str) -> list[tuple[str, int]]:
    """``"v4-flash:8,v32:64"`` -> ``[("v4-flash", 8), ("v32", 64)]``; ValueError on a malformed
    item."""
    points = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, batch = item.rpartition(":")
        if not sep or not (batch.isascii() and batch.isdigit()) or int(batch) < 1:
            raise ValueError(f"point {item!r} must be shape:batch with a positive batch")
        points.append((name, int(batch)))
    return points


def main(argv: list[str] | None = None) -> int:
    """Run the probe (see the module docstring); returns the exit status (2 on bad arguments or no
    GPU)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", required=True)
    ap.add_argument("--points", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=0.02, help="timed window per variant and point (s)")
    ap.add_argument("--jobs", type=int, default=8, help="compile processes before timing")
    ap.add_argument("--top", type=int, default=12, help="rows printed per point")
    ap.add_argument("--package", default=str(PACKAGE), help="package directory (default: this one)")
    ap.add_argument("--define", action="append", default=[], metavar="NAME",
                    help="add -DNAME (NAME or NAME=VALUE, letters, digits, '_') to every nvcc build")
    args = ap.parse_args(argv)
    for name in args.define:
        if not DEFINE_RE.fullmatch(name):
            sys.stderr.write(f"probe: --define {name!r} must be NAME or NAME=VALUE (letters, digits, '_')\n")
            return 2
    import torch

    if not torch.cuda.is_available():
        sys.stderr.write("probe: no CUDA GPU is visible to PyTorch\n")
        return 2
    package = load_package(args.package)
    if args.define:
        if package.language != "cuda":
            sys.stderr.write("probe: --define applies to a CUDA package's nvcc builds only\n")
            return 2
        package.cuda["nvcc_flags"] = [*package.cuda.get("nvcc_flags", []), *(f"-D{d}" for d in args.define)]
        print(f"probe: every build with {' '.join('-D' + d for d in args.define)}", flush=True)
    variants = load_variants(args.variants)
    try:
        points = parse_points(args.points)
        shapes = {name: package.shape(name) for name, _ in points}
    except ValueError as exc:
        sys.stderr.write(f"probe: {exc}\n")
        return 2
    device = bench.device_facts(torch, 0)
    # No calibration here (it costs seconds of GPU time): the ceilings an earlier full job measured
    # on an H200 (4274 GB/s copy, 789 TFLOP/s bf16) stand in; they only scale roofline_fraction.
    device["hbm_gbps"], device["bf16_tflops"] = 4274.0, 789.0
    bench.time_launches.__defaults__ = (args.seconds,)
    module, run_for = bench._bench_module(package)
    reference = package.reference_fn()
    bench.prepare_builds(package, run_for, variants, list(shapes.values()), sorted({b for _, b in points}), args.jobs)
    rows: list[dict] = []
    out = Path(args.out)
    for name, batch in points:
        shape = shapes[name]
        nbytes, _ = package.cost_of(shape, batch)
        sets = bench.make_sets(module, shape, batch, bench.rotation_copies(nbytes, device["l2_bytes"]), 0)
        ref = reference(sets[0])
        torch.cuda.synchronize()
        here = []
        for variant in variants:
            row = bench.bench_variant(torch, module, variant, shape, batch, sets, ref, package, device,
                                      run_one=run_for(variant))
            row.pop("timing", None)
            here.append(row)
        rows.extend(here)
        del sets, ref
        torch.cuda.empty_cache()
        out.write_text(json.dumps(rows, indent=0))
        ok = sorted((r for r in here if r["correct"]), key=lambda r: r["median_us"])
        bad = [r for r in here if not r["correct"]]
        print(f"== {name} b{batch}: roofline {here[0]['roofline_us']:.1f} us, {len(ok)} correct, {len(bad)} failed",
              flush=True)
        for r in ok[:args.top]:
            print(f"  {r['median_us']:8.1f} us  {r['roofline_fraction'] * 100:5.1f}%  v{r['variant_id']}", flush=True)
        for r in bad[:3]:
            print(f"  FAILED v{r['variant_id']}: {(r['error'] or '')[:160]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
