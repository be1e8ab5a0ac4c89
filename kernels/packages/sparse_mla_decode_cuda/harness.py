"""GPU harness of the CUDA sparse MLA decode package: inputs and launches for the runner's bench.

``make_inputs`` / ``make_rotation`` come from this package's ``inputs.py``, which draws the Triton
package's tensors value for value (same generator, same seeds), so both packages are measured on
identical inputs and their rows compare one to one. ``launch(params, inputs)`` loads the variant's cubin (``params["cubin"]``, built
by the runner with nvcc for this GPU) through the CUDA driver API (``libcuda`` via ctypes, into
PyTorch's current context) and launches it on PyTorch's current stream, so CUDA-graph capture
works as for any PyTorch kernel.

Launch geometry:

* ``baseline``: grid ``(batch, heads)``, ``num_warps * 32`` threads, static shared memory.
* ``head_tiled`` / ``split_k``: grid ``(heads / 64 * splits, batch)``, 256 threads,
  ``tiled_smem_bytes`` of dynamic shared memory; ``heads`` must be a multiple of 64 and ``d_v``
  512. ``split_k`` adds ``sparse_mla_combine_splits`` (grid ``(heads, batch)``, 128 threads) when it
  splits. ``NUM_SPLITS = "auto"``: see ``split_plan``.
* ``num_warps = 12`` (either tiled implementation): the seesaw schedule of ``seesaw_sm90.cuh``,
  384 threads, ``seesaw_smem_bytes`` of dynamic shared memory, splits of whole pairs of tiles.

Errors: ValueError for a shape the kernels cannot take or bad parameters; RuntimeError with the
driver's error name when a driver call fails.
"""
from __future__ import annotations

import ctypes
import math
from pathlib import Path

HEAD_TILE = 64
TILED_THREADS = 256
SEESAW_WARPS = 12          # num_warps of the seesaw schedule (three warp groups)
SEESAW_THREADS = SEESAW_WARPS * 32
TILED_DV = 512
MAX_SHARED_BYTES = 232448   # the most dynamic shared memory a block may opt into on sm_90 (227 KiB)


def _inputs():
    """This package's ``inputs.py`` (loaded by path: the runner loads the harness as a file)."""
    import importlib.util
    import sys

    name = "_ceiling_sparse_mla_cuda_inputs"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / "inputs.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def make_inputs(shape: dict, batch: int, device, seed: int, *, padding: int = 0) -> dict:
    """One decode step's inputs (``inputs.make_inputs``: the Triton package's tensors, value for value)."""
    return _inputs().make_inputs(shape, batch, device, seed, padding=padding)


def make_rotation(shape: dict, batch: int, device, seed: int, copies: int, *, padding: int = 0) -> list[dict]:
    """``copies`` input sets over one cache pool for cold-L2 timing (``inputs.make_rotation``)."""
    return _inputs().make_rotation(shape, batch, device, seed, copies, padding=padding)


def tiled_smem_bytes(d_qk: int, block_n: int, stages: int) -> int:
    """Dynamic shared memory of a tiled block in bytes (``TILED_SMEM_BYTES`` in tiled_sm90.cuh): the
    64-head q tile, ``stages`` gathered tiles of ``block_n`` rows, the bf16 P tile (64 x 128 B),
    two [2][64] fp32 arrays (rescale factors, row sums), the per-stage row flags and 1 KiB of
    alignment slack."""
    return HEAD_TILE * d_qk * 2 + stages * block_n * d_qk * 2 + HEAD_TILE * 128 + 4 * HEAD_TILE * 4 + block_n * stages * 4 + 1024


def seesaw_smem_bytes(d_qk: int) -> int:
    """Dynamic shared memory of a seesaw block in bytes (``SEESAW_SMEM_BYTES`` in seesaw_sm90.cuh):
    q and two 64-row buffers (64 x ``d_qk`` bf16 each), two 8 KiB P tiles unless ``d_qk`` has a
    64-column rope block to hold them (576), 2.5 KiB of mbarriers, row ids and exchange arrays and
    1 KiB of alignment slack."""
    return 3 * HEAD_TILE * d_qk * 2 + (2 * HEAD_TILE * 128 if d_qk == 512 else 0) + 2560 + 1024


def is_seesaw(params: dict) -> bool:
    """Whether a tiled variant runs the seesaw schedule (``num_warps`` 12)."""
    return params.get("impl") != "baseline" and int(params.get("num_warps", 8)) == SEESAW_WARPS


def split_plan(params: dict, shape: dict, batch: int, sm_count: int) -> tuple[int, int]:
    """``(num_splits, tokens_per_split)`` of a tiled launch: 1 split for ``head_tiled``; for
    ``split_k`` the explicit ``NUM_SPLITS`` or, for ``"auto"``, the most blocks that still fit one
    wave, ``floor(sm_count / (batch * heads / 64))`` (at least 1: a block fills an SM's shared
    memory, so a second wave would run the whole kernel time again); capped at one ``BLOCK_N`` tile
    (a seesaw variant: one pair of tiles) per split and recomputed so no split is empty."""
    block_n = int(params.get("BLOCK_N", 64)) * (2 if is_seesaw(params) else 1)
    topk = int(shape["topk"])
    n_tiles = math.ceil(topk / block_n)
    if n_tiles == 0:
        return 1, 0
    if params.get("impl") != "split_k":
        return 1, n_tiles * block_n
    want = params.get("NUM_SPLITS", "auto")
    if want == "auto":
        splits = max(1, sm_count // (batch * (int(shape["heads"]) // HEAD_TILE)))
    else:
        splits = int(want)
        if splits < 1:
            raise ValueError(f"NUM_SPLITS must be >= 1 or 'auto', got {want!r}")
    splits = max(1, min(splits, n_tiles))
    per_split = math.ceil(n_tiles / splits) * block_n
    return math.ceil(topk / per_split), per_split


# --------------------------------------------------------------------------------------------
# CUDA driver API through ctypes
# --------------------------------------------------------------------------------------------
_LIB = None
_MODULES: dict = {}
_WORKSPACE: dict = {}
_SM_COUNT: dict = {}
_ATTR_MAX_DYNAMIC_SHARED = 8   # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


def _driver():
    global _LIB
    if _LIB is None:
        _LIB = ctypes.CDLL("libcuda.so.1")
    return _LIB


def _check(status: int, what: str) -> None:
    if status != 0:
        name = ctypes.c_char_p()
        _driver().cuGetErrorName(status, ctypes.byref(name))
        raise RuntimeError(f"{what} failed: {name.value.decode() if name.value else status}")


def _function(cubin: str, name: str, shared_bytes: int):
    """The kernel ``name`` of ``cubin`` in PyTorch's current context, with ``shared_bytes`` of
    dynamic shared memory allowed (cached per context, cubin and name)."""
    lib = _driver()
    ctx = ctypes.c_void_p()
    _check(lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    if not ctx.value:
        raise RuntimeError("no current CUDA context: initialise PyTorch's CUDA first")
    key = (ctx.value, cubin, name)
    if key not in _MODULES:
        module = ctypes.c_void_p()
        _check(lib.cuModuleLoad(ctypes.byref(module), str(cubin).encode()), f"cuModuleLoad({cubin})")
        fn = ctypes.c_void_p()
        _check(lib.cuModuleGetFunction(ctypes.byref(fn), module, name.encode()), f"cuModuleGetFunction({name})")
        _MODULES[key] = [fn, 0]
    fn, allowed = _MODULES[key]
    if shared_bytes > 48 * 1024 and shared_bytes > allowed:
        _check(lib.cuFuncSetAttribute(fn, _ATTR_MAX_DYNAMIC_SHARED, ctypes.c_int(shared_bytes)),
               f"cuFuncSetAttribute({name}, {shared_bytes} B shared)")
        _MODULES[key][1] = shared_bytes
    return fn


def _has_function(cubin: str, name: str) -> bool:
    """Whether ``cubin`` holds the kernel ``name`` (a ``-DFUSED_COMBINE`` or ``-DSIBLING_COMBINE`` build
    holds no combine)."""
    key = (cubin, name)
    if key not in _FOUND:
        lib = _driver()
        module, fn = ctypes.c_void_p(), ctypes.c_void_p()
        _check(lib.cuModuleLoad(ctypes.byref(module), str(cubin).encode()), f"cuModuleLoad({cubin})")
        _FOUND[key] = lib.cuModuleGetFunction(ctypes.byref(fn), module, name.encode()) == 0
        lib.cuModuleUnload(module)
    return _FOUND[key]


_FOUND: dict = {}


class _LaunchAttribute(ctypes.Structure):
    """``CUlaunchAttribute`` (cuda.h): the attribute id, padding to 8 bytes, the 64-byte value union
    (as 16 ints: the attributes used here take one int)."""
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_int), ("value", ctypes.c_int * 16)]


class _LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig`` (cuda.h) for ``cuLaunchKernelEx``."""
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION = 6   # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
# Programmatic dependent launch for the tiled kernels and the combine (CUDA programming guide,
# "Programmatic Dependent Launch"): a launch may be scheduled while the previous kernel on the
# stream finishes; the kernels wait (griddepcontrol.wait) before their first global-memory access,
# so only launch latency overlaps, as in an engine that enables it. False: plain launches.
PDL = True


def _launch(fn, grid: tuple, threads: int, shared_bytes: int, stream: int, args: list, *, pdl: bool = False) -> None:
    """Launch ``fn`` on ``stream`` with ``args`` (tensors by data pointer, ctypes scalars as they
    are); ``pdl`` allows programmatic dependent launch (``cuLaunchKernelEx``). RuntimeError with
    the driver's error name when the launch is refused."""
    holders = []
    for value in args:
        if isinstance(value, ctypes._SimpleCData):
            holders.append(value)
        elif hasattr(value, "data_ptr"):
            holders.append(ctypes.c_void_p(value.data_ptr()))
        else:
            raise TypeError(f"unsupported kernel argument {value!r}")
    params = (ctypes.c_void_p * len(holders))(*[ctypes.cast(ctypes.byref(h), ctypes.c_void_p) for h in holders])
    gx, gy, gz = (tuple(grid) + (1, 1))[:3]
    if not pdl:
        _check(_driver().cuLaunchKernel(fn, gx, gy, gz, threads, 1, 1, shared_bytes, ctypes.c_void_p(stream), params,
                                        None), "cuLaunchKernel")
        return
    attr = _LaunchAttribute(id=_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION)
    attr.value[0] = 1
    config = _LaunchConfig((ctypes.c_uint * 3)(gx, gy, gz), (ctypes.c_uint * 3)(threads, 1, 1), shared_bytes,
                           ctypes.c_void_p(stream), ctypes.pointer(attr), 1)
    _check(_driver().cuLaunchKernelEx(ctypes.byref(config), fn, params, None), "cuLaunchKernelEx")


def _sm_count(torch, device) -> int:
    key = str(device)
    if key not in _SM_COUNT:
        _SM_COUNT[key] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SM_COUNT[key]


def launch(params: dict, inputs: dict):
    """Run one decode step with the variant ``params`` (its grid values plus ``cubin``) on
    ``inputs`` (from ``make_inputs``); returns ``inputs["out"]`` ([batch, heads, d_v] bf16)."""
    import torch

    q, kv, idx, out = inputs["q"], inputs["kv"], inputs["indices"], inputs["out"]
    _check_inputs(torch, q, kv, idx, out, int(inputs["d_v"]))
    with torch.cuda.device(q.device):    # the cubin loads into, and launches on, q's device
        return _launch_variant(torch, params, inputs)


def _check_inputs(torch, q, kv, idx, out, d_v: int) -> None:
    """ValueError unless the tensors are what the kernels read: contiguous, on one CUDA device,
    bf16 (int32 indices), with matching shapes."""
    named = {"q": q, "kv": kv, "indices": idx, "out": out}
    for name, t in named.items():
        want = torch.int32 if name == "indices" else torch.bfloat16
        if t.dtype != want:
            raise ValueError(f"{name} must be {want}, got {t.dtype}")
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    if q.dim() != 3 or kv.dim() != 2 or idx.dim() != 2 or kv.shape[1] != q.shape[2] or idx.shape[0] != q.shape[0]:
        raise ValueError(f"shapes do not fit: q {tuple(q.shape)} [batch, heads, d_qk], kv {tuple(kv.shape)} "
                         f"[rows, d_qk], indices {tuple(idx.shape)} [batch, topk]")
    if tuple(out.shape) != (q.shape[0], q.shape[1], d_v):
        raise ValueError(f"out {tuple(out.shape)} must be [batch, heads, d_v] = {(q.shape[0], q.shape[1], d_v)}")
    for name, t in named.items():
        if t.device != q.device or t.device.type != "cuda":
            raise ValueError(f"{name} is on {t.device}; every tensor must be on one CUDA device (q: {q.device})")


def _launch_variant(torch, params: dict, inputs: dict):
    q, kv, idx, out = inputs["q"], inputs["kv"], inputs["indices"], inputs["out"]
    batch, heads, d_qk = q.shape
    d_v, topk = int(inputs["d_v"]), idx.shape[1]
    cubin = params.get("cubin")
    if not cubin:
        raise ValueError("params has no 'cubin' (the runner adds the path of the variant's build)")
    impl = params.get("impl", "baseline")
    if impl == "baseline":
        if d_qk > 1024 or d_v > 512 or d_v > d_qk:
            raise ValueError(f"the baseline takes d_qk <= 1024 and d_v <= min(512, d_qk); got d_qk {d_qk}, d_v {d_v}")
        stream = torch.cuda.current_stream(q.device).cuda_stream
        fn = _function(cubin, "sparse_mla_decode_baseline", 0)
        _launch(fn, (batch, heads), int(params["num_warps"]) * 32, 0, stream,
                [q, kv, idx, out, ctypes.c_int(heads), ctypes.c_int(d_qk), ctypes.c_int(d_v), ctypes.c_int(topk),
                 ctypes.c_float(float(inputs["sm_scale"]))])
        return out
    if impl not in ("head_tiled", "split_k"):
        raise ValueError(f"impl must be baseline, head_tiled or split_k, got {impl!r}")
    if heads % HEAD_TILE or d_v != TILED_DV or d_qk not in (512, 576):
        raise ValueError(f"the tiled kernels need heads % 64 == 0, d_v == 512 and d_qk 512 or 576; got heads "
                         f"{heads}, d_v {d_v}, d_qk {d_qk}")
    block_n, stages = int(params["BLOCK_N"]), int(params["STAGES"])
    seesaw = is_seesaw(params)
    shared = seesaw_smem_bytes(d_qk) if seesaw else tiled_smem_bytes(d_qk, block_n, stages)
    if shared > MAX_SHARED_BYTES:
        raise ValueError(f"BLOCK_N {block_n} x STAGES {stages} needs {shared} B of shared memory for d_qk {d_qk}; "
                         f"a block may have {MAX_SHARED_BYTES}")
    stream = torch.cuda.current_stream(q.device).cuda_stream
    splits, per_split = split_plan(params, {"topk": topk, "heads": heads}, batch, _sm_count(torch, q.device))
    if splits > 1:
        key = (str(q.device), batch, splits, heads)
        if key not in _WORKSPACE:
            _WORKSPACE[key] = (torch.empty((batch, splits, heads, d_v), dtype=torch.bfloat16, device=q.device),
                               torch.empty((batch, splits, heads), dtype=torch.float32, device=q.device),
                               torch.zeros((batch, heads // HEAD_TILE), dtype=torch.int32, device=q.device))
        o_part, lse, split_done = _WORKSPACE[key]   # one set per size, as an engine shares it across
        # layers: launches of one size on one stream never overlap (two concurrent streams would need
        # their own); split_done is zero between launches
    else:
        o_part = lse = split_done = out         # not written when there is one split
    fn = _function(cubin, f"sparse_mla_decode_{'seesaw' if seesaw else 'tiled'}_d{d_qk}", shared)
    scale_log2 = float(inputs["sm_scale"]) * math.log2(math.e)
    _launch(fn, (heads // HEAD_TILE * splits, batch), SEESAW_THREADS if seesaw else TILED_THREADS, shared, stream,
            [q, kv, idx, out, o_part, lse, ctypes.c_int(heads), ctypes.c_int(topk), ctypes.c_int(per_split),
             ctypes.c_int(splits), ctypes.c_float(scale_log2), split_done], pdl=PDL)
    if splits > 1 and _has_function(cubin, "sparse_mla_combine_splits"):
        combine = _function(cubin, "sparse_mla_combine_splits", 0)
        _launch(combine, (heads, batch), 128, 0, stream, [o_part, lse, out, ctypes.c_int(heads), ctypes.c_int(splits)],
                pdl=PDL)
    return out
