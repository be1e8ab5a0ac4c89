"""Command line of the kernel runner (no Django; runs in the engine's Python on a GPU node).

    python -m kernels.runner compile --package kernels/packages/<name> --variants variants.json \\
        --target cuda:90 --out builds.json
    python -m kernels.runner bench --package kernels/packages/<name> --variants variants.json \\
        --out results.json [--shapes v4-flash,v32] [--batches 1,8,64] [--calibrate-only] [--jobs N]

Both write their JSON result only to ``--out`` (``compile`` also appends each build as a JSON line
to ``<out>.partial`` while it works, removed at the end) and progress lines ``{"progress": {"done": n,
"total": m}}`` to stdout; errors that stop the whole command go to stderr with exit status 2.
``compile`` needs no GPU; ``bench`` needs one (see ``bench.py`` for what it measures).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from .bench import emit_progress, main_bench
from .build import build_variant, parse_target
from .package import PackageError, load_package, load_variants


def main_compile(args) -> int:
    """Build every variant for ``--target`` and write the list of build facts to ``--out``.
    Triton compiles into a fresh cache directory so that ``build_s`` is a real compile time."""
    try:
        package = load_package(args.package)
        variants = load_variants(args.variants)
        cc = parse_target(args.target)
    except (PackageError, ValueError) as exc:
        sys.stderr.write(f"compile: {exc}\n")
        return 2
    builds = []
    out = Path(args.out)
    partial = partial_path(out)
    emit_progress(0, len(variants))
    with tempfile.TemporaryDirectory(prefix="ceiling-triton-cache-") as cache, \
            open(partial, "w", encoding="utf-8") as lines:
        os.environ["TRITON_CACHE_DIR"] = cache
        for i, variant in enumerate(variants, 1):
            builds.append(build_variant(package, variant, cc))
            # Written before the progress line, so whoever reads "done: i" finds i builds here.
            lines.write(json.dumps(builds[-1]) + "\n")
            lines.flush()
            emit_progress(i, len(variants))
    out.write_text(json.dumps(builds, indent=1))
    partial.unlink(missing_ok=True)
    return 0


def partial_path(out: Path) -> Path:
    """Where ``compile`` appends each variant's build facts as one JSON line as soon as it is
    built (``<out>.partial``): a run ended early (cancel, timeout) leaves the builds done so far
    there. Removed once ``--out`` is written."""
    return out.with_name(out.name + ".partial")


def parser() -> argparse.ArgumentParser:
    """The argument parser of both subcommands."""
    p = argparse.ArgumentParser(prog="python -m kernels.runner", description="Build and benchmark kernel variants.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="build facts for each variant, no GPU needed")
    c.add_argument("--package", required=True, help="package directory (holds manifest.toml)")
    c.add_argument("--variants", required=True, help='JSON list of {"variant_id", "params"}')
    c.add_argument("--target", required=True, help="compute capability, e.g. cuda:90")
    c.add_argument("--out", required=True, help="where to write builds.json")
    b = sub.add_parser("bench", help="correctness and timing on the GPU")
    b.add_argument("--package", required=True)
    b.add_argument("--variants", help='JSON list of {"variant_id", "params"} (optional with --calibrate-only)')
    b.add_argument("--out", required=True, help="where to write results.json")
    b.add_argument("--shapes", help="comma-separated shape names (default: all)")
    b.add_argument("--batches", help="comma-separated batch sizes (default: each shape's list)")
    b.add_argument("--calibrate-only", action="store_true", help="only measure HBM GB/s and bf16 TFLOP/s")
    b.add_argument("--seed", type=int, default=0, help="seed of the generated inputs")
    b.add_argument("--jobs", type=int, default=0, help="processes compiling ahead of timing (0: min(8, CPUs))")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = parser().parse_args(argv)
    if args.command == "compile":
        return main_compile(args)
    if not args.calibrate_only and not args.variants:
        sys.stderr.write("bench: --variants is required unless --calibrate-only\n")
        return 2
    return main_bench(args)


if __name__ == "__main__":
    sys.exit(main())
