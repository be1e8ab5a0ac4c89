"""GPU microbenchmarks of kernel variants: calibration, correctness, then cold-cache timing.

``run_bench`` produces the ``results.json`` of the runner contract::

    {"device": {"name", "cc", "sm_count", "l2_bytes", "hbm_gbps", "bf16_tflops", "driver", "cuda",
                "torch", "triton"},
     "variants_sha256": "<64 hex digits>",
     "results": [{"variant_id", "shape", "batch", "correct", "max_abs_err", "max_rel_err", "error",
                  "median_us", "p10_us", "p90_us", "min_us", "reps", "gbps", "tflops",
                  "roofline_us", "roofline_fraction", "bound", "timing"}]}

``variants_sha256`` fingerprints the variants list the run measured
(:func:`kernels.runner.package.variants_sha256` of the list as read from ``--variants``; absent
when no variants were given), so that the control plane can refuse to store the results against a
job whose variant ids mean other parameters.

How each number is obtained:

* ``hbm_gbps``: median over 10 device-to-device copies of a 2 GiB buffer (after 3 warm-ups), bytes
  read plus bytes written over the copy's CUDA-event time, in GB/s (1e9 B/s). Measured on this GPU
  by this run; it is the memory ceiling of the roofline.
* ``bf16_tflops``: median over 10 ``torch.matmul`` of two 8192 x 8192 bf16 matrices of N(0, 1)
  values (after 3 warm-ups), ``2 * 8192**3`` FLOPs over the event time, in TFLOP/s (1e12). The
  compute ceiling of the roofline (dense bf16 on the tensor cores, as cuBLAS reaches it).
* Correctness first: the variant runs once on the first input set and is compared with the
  package's PyTorch reference element-wise, ``|out - ref| <= atol + rtol * |ref|`` (manifest
  tolerances), non-finite values failing. ``max_abs_err`` is ``max |out - ref|``;
  ``max_rel_err`` is that over ``max |ref|`` (relative to the output's scale, so that outputs near
  zero do not make it meaningless). A variant that raises or is wrong gets ``correct: false``, the
  reason in ``error`` and no timing.
* Cold-cache rotation: ``copies = clamp(ceil(3 * L2 / bytes_per_call), 2, 512)`` independent input
  sets (the package's ``make_rotation`` when it has one, so that they share one cache pool; else
  ``make_inputs`` with seeds ``seed + i``), launched in turn, so a call's working set has been
  evicted from L2 by the time it comes round again (L2 size from
  ``torch.cuda.get_device_properties().L2_cache_size``; 50 MiB on H100 and H200 if unknown).
* Timing: one eager launch per copy as warm-up (this also compiles), then one CUDA graph capturing
  one launch per copy, replayed ``R`` times (``R = clamp(ceil(0.05 s / replay time), 10, 200)``) with
  a CUDA event pair around each replay. Each replay gives a per-launch time ``elapsed / copies``;
  ``median_us``, ``p10_us``, ``p90_us`` and ``min_us`` are over those ``R`` samples and ``reps`` is
  ``R * copies`` launches. If capture fails, the same loop runs eagerly between the events (then
  CPU launch cost can show in short kernels) and ``timing`` says so with the capture error.
* ``gbps = bytes / median``, ``tflops = flops / median`` with bytes and FLOPs per call from the
  manifest's ``[cost]`` formulas; ``roofline_us = max(bytes / hbm_gbps, flops / bf16_tflops)``;
  ``roofline_fraction = roofline_us / median_us``; ``bound`` names the larger term.

Progress goes to stdout as JSON lines ``{"progress": {"done": n, "total": m}}``; the JSON result is
written only to the output path (rewritten after each shape and batch, so a run cut short keeps
what it measured).
"""
from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .package import Package, PackageError, load_package, load_variants, variants_sha256

ROTATE_FACTOR = 3           # input copies touch at least this many times the L2 size per rotation
MAX_COPIES = 512
DEFAULT_L2_BYTES = 50 * 2**20
TIMED_SECONDS = 0.05        # wall time of timed replays per variant, shape and batch
MIN_REPLAYS, MAX_REPLAYS = 10, 200


class BenchError(RuntimeError):
    """The bench cannot run at all (no GPU, no PyTorch, a broken package); the message says why."""


def emit_progress(done: int, total: int, stream=None) -> None:
    """Write one ``{"progress": {"done", "total"}}`` JSON line to stdout (flushed)."""
    stream = stream or sys.stdout
    stream.write(json.dumps({"progress": {"done": done, "total": total}}) + "\n")
    stream.flush()


def percentile(values: list[float], q: float) -> float:
    """The ``q`` (0..1) percentile of ``values`` with linear interpolation between ranks."""
    data = sorted(values)
    if not data:
        raise ValueError("no values")
    pos = (len(data) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def roofline(nbytes: float, flops: float, hbm_gbps: float, bf16_tflops: float) -> tuple[float, str]:
    """Return ``(roofline_us, bound)``: the time the call needs at the measured HBM bandwidth
    (GB/s) or the measured dense bf16 rate (TFLOP/s), whichever is longer, in microseconds, and
    ``"memory"`` or ``"compute"`` for the term that sets it."""
    mem_us = nbytes / (hbm_gbps * 1e9) * 1e6
    cmp_us = flops / (bf16_tflops * 1e12) * 1e6
    return (mem_us, "memory") if mem_us >= cmp_us else (cmp_us, "compute")


def rotation_copies(bytes_per_call: float, l2_bytes: int) -> int:
    """How many input copies make one rotation touch ``ROTATE_FACTOR`` times the L2 size, clamped to
    ``[2, MAX_COPIES]``."""
    return max(2, min(MAX_COPIES, math.ceil(ROTATE_FACTOR * l2_bytes / max(bytes_per_call, 1.0))))


# --------------------------------------------------------------------------------------------
# Device facts and calibration
# --------------------------------------------------------------------------------------------
def _driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else version
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def device_facts(torch, index: int = 0) -> dict:
    """Name, compute capability ``"9.0"``, SM count, L2 bytes, driver and library versions of GPU
    ``index`` (no measurement)."""
    props = torch.cuda.get_device_properties(index)
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "name": props.name,
        "cc": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "l2_bytes": int(getattr(props, "L2_cache_size", 0) or DEFAULT_L2_BYTES),
        "hbm_gbps": None,
        "bf16_tflops": None,
        "driver": _driver_version(),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton_version,
    }


def _event_times_ms(torch, fn, reps: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def measure_hbm_gbps(torch, nbytes: int = 2 * 2**30, reps: int = 10) -> float:
    """Device-to-device copy bandwidth in GB/s (read + write bytes), median of ``reps`` copies of
    ``nbytes`` after 3 warm-ups. Allocates ``2 * nbytes`` on the GPU for the duration."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    src.fill_(1)
    times = _event_times_ms(torch, lambda: dst.copy_(src), reps, 3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / (statistics.median(times) * 1e-3) / 1e9


def measure_bf16_tflops(torch, n: int = 8192, reps: int = 10) -> float:
    """Dense bf16 matmul rate in TFLOP/s: median of ``reps`` ``n x n x n`` products of N(0, 1)
    matrices after 3 warm-ups (``2 n^3`` FLOPs each)."""
    a = torch.randn((n, n), device="cuda", dtype=torch.bfloat16)
    b = torch.randn((n, n), device="cuda", dtype=torch.bfloat16)
    c = torch.empty((n, n), device="cuda", dtype=torch.bfloat16)
    times = _event_times_ms(torch, lambda: torch.matmul(a, b, out=c), reps, 3)
    del a, b, c
    torch.cuda.empty_cache()
    return 2 * n**3 / (statistics.median(times) * 1e-3) / 1e12


# --------------------------------------------------------------------------------------------
# Correctness and timing of one variant
# --------------------------------------------------------------------------------------------
def empty_result(variant_id, shape: str, batch: int) -> dict:
    """A result row with every measured field empty (``correct: false``)."""
    return {"variant_id": variant_id, "shape": shape, "batch": batch, "correct": False, "max_abs_err": None,
            "max_rel_err": None, "error": None, "median_us": None, "p10_us": None, "p90_us": None,
            "min_us": None, "reps": 0, "gbps": None, "tflops": None, "roofline_us": None,
            "roofline_fraction": None, "bound": None, "timing": None}


def compare(torch, out, ref, atol: float, rtol: float) -> tuple[bool, float, float, str | None]:
    """Compare ``out`` with ``ref`` element-wise (``|out - ref| <= atol + rtol * |ref|``). Returns
    ``(ok, max_abs_err, max_rel_err, reason)``; ``reason`` explains a failure."""
    if tuple(out.shape) != tuple(ref.shape):
        return False, math.inf, math.inf, f"output shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    o, r = out.float(), ref.float()
    diff = (o - r).abs()
    finite = bool(torch.isfinite(o).all())
    max_abs = float(diff.max()) if diff.numel() else 0.0
    scale = float(r.abs().max()) if r.numel() else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
    if not finite:
        return False, max_abs, max_rel, "output has NaN or Inf values"
    bad = int((diff > atol + rtol * r.abs()).sum())
    if bad:
        return False, max_abs, max_rel, (f"wrong result: {bad} of {diff.numel()} elements outside atol {atol} + "
                                         f"rtol {rtol} x |ref| (max abs err {max_abs:.4g}, max |ref| {scale:.4g})")
    return True, max_abs, max_rel, None


def time_launches(torch, run_one, sets: list, target_s: float = TIMED_SECONDS) -> dict:
    """Time ``run_one(inputs)`` over the rotation ``sets`` (see the module docstring): returns
    ``{"samples_us": [...], "reps", "timing"}`` with one per-launch sample per replay."""
    for inputs in sets:
        run_one(inputs)
    torch.cuda.synchronize()
    timing = f"cuda_graph ({len(sets)} rotated input sets per replay)"
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for inputs in sets:
                run_one(inputs)
        replay = graph.replay
        replay()
        torch.cuda.synchronize()
    except Exception as exc:  # capture is refused by some kernels and drivers; time eagerly then
        graph = None
        torch.cuda.synchronize()
        reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        timing = f"events, eager launches (CUDA graph capture failed: {reason})"

        def replay():
            for inputs in sets:
                run_one(inputs)
    t0 = time.perf_counter()
    replay()
    torch.cuda.synchronize()
    one = max(time.perf_counter() - t0, 1e-6)
    replays = max(MIN_REPLAYS, min(MAX_REPLAYS, math.ceil(target_s / one)))
    times_ms = _event_times_ms(torch, replay, replays, 1)
    del graph
    samples = [t * 1e3 / len(sets) for t in times_ms]
    return {"samples_us": samples, "reps": replays * len(sets), "timing": f"{timing}, {replays} replays"}


def bench_variant(torch, module, variant: dict, shape: dict, batch: int, sets: list, ref, package: Package,
                  device: dict, run_one=None) -> dict:
    """Correctness, then (only if correct) timing of one variant on one shape and batch. Never
    raises for a failing variant: the reason goes into ``error``."""
    result = empty_result(variant["variant_id"], shape["name"], batch)
    nbytes, flops = package.cost_of(shape, batch)
    roof_us, bound = roofline(nbytes, flops, device["hbm_gbps"], device["bf16_tflops"])
    result.update({"roofline_us": roof_us, "bound": bound})
    params = variant["params"]
    run_one = run_one or (lambda inputs: module.launch(params, inputs))
    try:
        out = run_one(sets[0])
        torch.cuda.synchronize()
    except Exception as exc:
        torch.cuda.synchronize()
        result["error"] = f"launch failed: {type(exc).__name__}: {str(exc)[:1500]}"
        return result
    ok, max_abs, max_rel, reason = compare(torch, out, ref, package.tolerance["atol"], package.tolerance["rtol"])
    result.update({"max_abs_err": max_abs, "max_rel_err": max_rel})
    if not ok:
        result["error"] = reason
        return result
    result["correct"] = True
    try:
        timed = time_launches(torch, run_one, sets)
    except Exception as exc:
        torch.cuda.synchronize()
        result["error"] = f"timing failed: {type(exc).__name__}: {str(exc)[:1500]}"
        return result
    samples = timed["samples_us"]
    median = statistics.median(samples)
    result.update({
        "median_us": median, "p10_us": percentile(samples, 0.1), "p90_us": percentile(samples, 0.9),
        "min_us": min(samples), "reps": timed["reps"], "timing": timed["timing"],
        "gbps": nbytes / (median * 1e-6) / 1e9, "tflops": flops / (median * 1e-6) / 1e12,
        "roofline_fraction": roof_us / median,
    })
    return result


# --------------------------------------------------------------------------------------------
# Parallel compile warm-up (Triton's on-disk cache is shared by processes)
# --------------------------------------------------------------------------------------------
def _warm_worker(package_root: str, variants: list[dict], shapes: list[dict], batches: list[int]) -> int:
    """Compile ``variants`` in this process by launching each once on small inputs of every shape
    (``kv_len = topk``) at each of ``batches``; the binaries land in Triton's disk cache, where the
    timing process finds them. Failures are ignored here: the timing process records them."""
    import torch

    package = load_package(package_root)
    module = package.load_module(package.entry)
    count = 0
    for shape in shapes:
        small = dict(shape, kv_len=shape["topk"])
        for batch in batches:
            inputs = module.make_inputs(small, batch, "cuda", 0)
            for variant in variants:
                try:
                    module.launch(variant["params"], inputs)
                    count += 1
                except Exception:
                    pass
            torch.cuda.synchronize()
            del inputs
    return count


def prepare_builds(package: Package, run_for, variants: list[dict], shapes: list[dict], batches: list[int],
                   jobs: int) -> None:
    """Compile every variant before timing starts, ``jobs`` at a time: Triton kernels through
    :func:`warm_compile`, a CUDA package's cubins through the ``prebuild`` of ``run_for`` (from
    :func:`_bench_module`)."""
    warm_compile(package, variants, shapes, batches, jobs)
    if hasattr(run_for, "prebuild"):
        run_for.prebuild(variants, jobs)


def warm_compile(package: Package, variants: list[dict], shapes: list[dict], batches: list[int], jobs: int) -> None:
    """Spread the Triton compiles of all variants over ``jobs`` processes before timing starts
    (compiling 100+ kernels one after another costs minutes of GPU-machine time). Each process
    makes its own CUDA context; ``jobs <= 1`` does nothing."""
    if jobs <= 1 or package.language != "triton" or not variants:
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    chunks = [variants[i::jobs] for i in range(jobs) if variants[i::jobs]]
    extremes = sorted({min(batches), max(batches)})
    with ProcessPoolExecutor(max_workers=len(chunks), mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(_warm_worker, str(package.root.resolve()), chunk, shapes, extremes) for chunk in chunks]
        for future in futures:
            try:
                future.result()
            except Exception:
                pass


# --------------------------------------------------------------------------------------------
# The whole bench
# --------------------------------------------------------------------------------------------
def _write(path: Path, payload: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1))
    os.replace(tmp, path)


def make_sets(module, shape: dict, batch: int, copies: int, seed: int) -> list:
    """Input sets for one shape and batch: ``make_rotation`` if the package has it, else
    ``copies`` calls of ``make_inputs`` with consecutive seeds."""
    if hasattr(module, "make_rotation"):
        return module.make_rotation(shape, batch, "cuda", seed, copies)
    return [module.make_inputs(shape, batch, "cuda", seed + i) for i in range(copies)]


def run_bench(package: Package, variants: list[dict], out: Path, *, shapes: list[str] | None = None,
              batches: list[int] | None = None, calibrate_only: bool = False, seed: int = 0,
              jobs: int = 0, progress=emit_progress) -> dict:
    """Calibrate the GPU, then check and time every variant on every selected shape and batch.

    ``shapes``/``batches`` restrict the manifest's lists (None: all). Writes the results JSON to
    ``out`` (also partially, after each shape and batch), with the ``variants_sha256`` of
    ``variants`` when there are any, and returns it. Raises BenchError when no CUDA GPU or no
    PyTorch is available, or the package lacks ``launch``/``make_inputs``."""
    # Fingerprinted before anything runs: the list exactly as read from the variants file.
    fingerprint = variants_sha256(variants) if variants else None
    try:
        import torch
    except ImportError:
        raise BenchError("PyTorch is not installed in this Python: bench needs it") from None
    if not torch.cuda.is_available():
        raise BenchError("no CUDA GPU is visible to PyTorch: bench needs one")
    torch.cuda.set_device(0)
    device = device_facts(torch, 0)
    device["hbm_gbps"] = measure_hbm_gbps(torch)
    device["bf16_tflops"] = measure_bf16_tflops(torch)
    payload = {"device": device, **({"variants_sha256": fingerprint} if fingerprint else {}), "results": []}
    _write(out, payload)
    if calibrate_only:
        return payload

    selected = [package.shape(name) for name in shapes] if shapes else list(package.shapes)
    combos = [(shape, b) for shape in selected for b in shape["batches"] if not batches or b in batches]
    if not combos:
        raise BenchError("no shape and batch left after --shapes/--batches")
    total = len(combos) * len(variants)
    progress(0, total)

    module, run_for = _bench_module(package)
    reference = package.reference_fn()
    jobs = jobs if jobs > 0 else min(8, os.cpu_count() or 1)
    prepare_builds(package, run_for, variants, selected, [b for _, b in combos], jobs)

    done = 0
    for shape, batch in combos:
        nbytes, _ = package.cost_of(shape, batch)
        copies = rotation_copies(nbytes, device["l2_bytes"])
        sets = make_sets(module, shape, batch, copies, seed)
        ref = reference(sets[0])
        torch.cuda.synchronize()
        for variant in variants:
            result = bench_variant(torch, module, variant, shape, batch, sets, ref, package, device,
                                   run_one=run_for(variant))
            payload["results"].append(result)
            done += 1
            progress(done, total)
        del sets, ref
        torch.cuda.empty_cache()
        _write(out, payload)
    return payload


def _bench_module(package: Package):
    """The module that makes inputs and launches variants, and a factory of per-variant launch
    callables. Triton packages: the entry module. CUDA packages: ``[cuda].harness`` (a Python file
    exposing ``make_inputs`` and ``launch(params, inputs)``), which receives the variant's params
    plus ``"cubin"``, the path of the cubin built for this GPU."""
    if package.language == "triton":
        module = package.load_module(package.entry)
        for name in ("launch", "make_inputs"):
            if not callable(getattr(module, name, None)):
                raise BenchError(f"{package.entry} has no {name}()")
        return module, lambda variant: (lambda inputs, p=variant["params"]: module.launch(p, inputs))
    harness = package.cuda.get("harness")
    if not harness:
        raise BenchError("benchmarking a CUDA package needs [cuda] harness = \"file.py\" exposing "
                         "make_inputs(shape, batch, device, seed) and launch(params, inputs)")
    module = package.load_module(harness)
    import tempfile

    import torch

    from .build import find_tool, nvcc_argv

    props = torch.cuda.get_device_properties(0)
    cc = props.major * 10 + props.minor
    nvcc = find_tool("nvcc")
    workdir = Path(tempfile.mkdtemp(prefix="ceiling-cubin-"))

    failures: dict[str, str] = {}

    def build(variant) -> tuple[Path, str | None]:
        """The variant's cubin path and, if it could not be built, why (built, or refused, once per
        workdir: the result is remembered). nvcc writes to a temporary name that is renamed only
        after it succeeds, so a cubin on disk is always complete."""
        stem = "v" + re.sub(r"[^A-Za-z0-9_-]", "_", str(variant["variant_id"]))
        cubin = workdir / (stem + ".cubin")
        if nvcc is None:
            return cubin, "nvcc not found: cannot build the cubin"
        if stem in failures:
            return cubin, failures[stem]
        if not cubin.exists():
            partial = workdir / (stem + ".partial.cubin")
            try:
                proc = subprocess.run(nvcc_argv(package, variant["params"], cc, nvcc, partial), capture_output=True,
                                      text=True, timeout=900, cwd=package.root)
            except (ValueError, OSError, subprocess.TimeoutExpired) as exc:
                failures[stem] = f"nvcc could not run: {type(exc).__name__}: {exc}"[:1600]
                return cubin, failures[stem]
            if proc.returncode != 0:
                partial.unlink(missing_ok=True)
                failures[stem] = f"nvcc failed: {proc.stderr.strip()[-1500:]}"
                return cubin, failures[stem]
            partial.replace(cubin)
        return cubin, None

    def run_for(variant):
        cubin, message = build(variant)
        if message:
            def fail(inputs, message=message):
                raise RuntimeError(message)
            return fail
        params = dict(variant["params"], cubin=str(cubin))
        return lambda inputs: module.launch(params, inputs)

    def prebuild(variants: list[dict], jobs: int) -> None:
        """Build every variant's cubin up front, ``jobs`` nvcc processes at a time (failures are
        reported when the variant is run)."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            list(pool.map(build, variants))

    run_for.prebuild = prebuild
    return module, run_for


def main_bench(args) -> int:
    """CLI body of ``bench`` (argument parsing is in ``__main__``). Returns the exit status."""
    try:
        package = load_package(args.package)
        variants = load_variants(args.variants) if args.variants else []
        run_bench(package, variants, Path(args.out),
                  shapes=[s for s in (args.shapes or "").split(",") if s] or None,
                  batches=[int(b) for b in (args.batches or "").split(",") if b] or None,
                  calibrate_only=args.calibrate_only, seed=args.seed, jobs=args.jobs)
    except (PackageError, BenchError, ValueError) as exc:
        sys.stderr.write(f"bench: {exc}\n")
        return 2
    return 0

