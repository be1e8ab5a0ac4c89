"""Sparse MLA decode attention over an FP8 latent cache, in Triton: ``params["impl"]`` picks one of
three implementations. Layout and semantics are those of ``reference.py`` (cache rows of ``d_v``
float8 e4m3 values, one float32 scale per 128 of them, then the bf16 rope columns; ``d_v`` is 512,
four scale tiles; the rope part is 0 or a power of two >= 16).

The tiled kernels dequantize each gathered tile once, in registers: the fp8 values widened to
fp32 (exact), times their 128-column tile's scale, rounded to bf16, which is the operand both
tensor-core products (``q . k`` and ``p . v``) read; q is not converted (with q converted to fp16
every 64-head variant spilled, most likely because a converted q becomes a register operand of
``wgmma``, 64 registers a thread, instead of a shared-memory one). The softmax is fp32 with P rounded to bf16 for
``p . v``, as in the bf16 package.

* ``baseline``: one program per (request, head) on the CUDA cores (no ``tl.dot``); every head
  re-reads every selected row. The flagship's baseline shape over the FP8 cache.
* ``head_tiled``: one program per (request, ``BLOCK_H`` heads, ``BLOCK_DV`` output columns): each
  ``BLOCK_N`` tile of selected rows is gathered once for the heads of the tile (indices a tile
  ahead, pipelined copies) and dequantized once; ``QK^T`` and ``PV`` are ``tl.dot`` (tensor cores)
  with an fp32 online softmax and an fp32 accumulator ``BLOCK_H x BLOCK_DV``. With ``BLOCK_DV =
  256`` the two programs of a head tile each compute the full ``QK^T`` (their own half of the
  columns first) but ``PV`` only for their half, which halves the accumulator (as in the bf16
  package).
* ``split_k``: ``head_tiled`` with the selected tokens split over ``NUM_SPLITS`` programs, each
  writing its fp32 partial output (normalised by its own softmax sum) and base-2 log-sum-exp, and
  a combine kernel. ``"auto"``: the smallest count giving at least two programs per SM.

Parameters (the manifest's grid): ``impl``, ``BLOCK_H``, ``BLOCK_N``, ``BLOCK_DV``, ``num_warps``,
``num_stages``, ``NUM_SPLITS``. Entry points the runner uses: ``make_inputs``, ``make_rotation``, ``launch``,
``compile_specs``.
"""
from __future__ import annotations

import math

import triton
import triton.language as tl

LOG2E = 1.4426950408889634
IMPLS = ("baseline", "head_tiled", "split_k")
D_V = 512                   # latent columns: four float32 scale tiles of 128
SCALE_TILE = 128
FP8_MAX = 448.0             # largest finite float8 e4m3fn value (OCP FP8 spec)
# q is scaled so the softmax is peaked (score std about 2.5), as in the bf16 flagship package: with
# unit-variance q the output is ~1/sqrt(topk) and a 2e-2 tolerance would not catch a wrong kernel.
Q_STD = 2.5


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------
@triton.jit
def _fp8_baseline(
    Q, KV8, KVF, KVB, IDX, OUT, sm_scale_log2,
    stride_qb, stride_qh, stride_ib, stride_ob, stride_oh,
    topk,
    ROW: tl.constexpr, D_ROPE: tl.constexpr, BLOCK_N: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_c = tl.arange(0, 128)
    q_base = Q + b * stride_qb + h * stride_qh
    q0 = tl.load(q_base + offs_c).to(tl.float32)
    q1 = tl.load(q_base + 128 + offs_c).to(tl.float32)
    q2 = tl.load(q_base + 256 + offs_c).to(tl.float32)
    q3 = tl.load(q_base + 384 + offs_c).to(tl.float32)
    if D_ROPE > 0:
        offs_r = tl.arange(0, D_ROPE)
        q_rope = tl.load(q_base + 512 + offs_r).to(tl.float32)
    m_i = -1.0e30
    l_i = 0.0
    acc0 = tl.zeros([128], dtype=tl.float32)
    acc1 = tl.zeros([128], dtype=tl.float32)
    acc2 = tl.zeros([128], dtype=tl.float32)
    acc3 = tl.zeros([128], dtype=tl.float32)
    for start in range(0, topk, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        idx = tl.load(IDX + b * stride_ib + offs_n, mask=offs_n < topk, other=-1)
        valid = idx >= 0
        row = tl.where(valid, idx, 0).to(tl.int64)
        f8 = KV8 + row[:, None] * ROW + offs_c[None, :]
        sc = KVF + row * (ROW // 4) + 128
        k0 = tl.load(f8, mask=valid[:, None], other=0.0).to(tl.float32)
        k1 = tl.load(f8 + 128, mask=valid[:, None], other=0.0).to(tl.float32)
        k2 = tl.load(f8 + 256, mask=valid[:, None], other=0.0).to(tl.float32)
        k3 = tl.load(f8 + 384, mask=valid[:, None], other=0.0).to(tl.float32)
        s0 = tl.load(sc, mask=valid, other=0.0)
        s1 = tl.load(sc + 1, mask=valid, other=0.0)
        s2 = tl.load(sc + 2, mask=valid, other=0.0)
        s3 = tl.load(sc + 3, mask=valid, other=0.0)
        s = (tl.sum(k0 * q0[None, :], axis=1) * s0 + tl.sum(k1 * q1[None, :], axis=1) * s1
             + tl.sum(k2 * q2[None, :], axis=1) * s2 + tl.sum(k3 * q3[None, :], axis=1) * s3)
        if D_ROPE > 0:
            rp = KVB + row[:, None] * (ROW // 2) + 264 + offs_r[None, :]
            kr = tl.load(rp, mask=valid[:, None], other=0.0).to(tl.float32)
            s += tl.sum(kr * q_rope[None, :], axis=1)
        s = tl.where(valid, s * sm_scale_log2, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        acc0 = acc0 * alpha + tl.sum((p * s0)[:, None] * k0, axis=0)
        acc1 = acc1 * alpha + tl.sum((p * s1)[:, None] * k1, axis=0)
        acc2 = acc2 * alpha + tl.sum((p * s2)[:, None] * k2, axis=0)
        acc3 = acc3 * alpha + tl.sum((p * s3)[:, None] * k3, axis=0)
        m_i = m_new
    inv_l = tl.where(l_i > 0.0, 1.0 / l_i, 0.0)
    o = OUT + b * stride_ob + h * stride_oh + offs_c
    tl.store(o, (acc0 * inv_l).to(OUT.dtype.element_ty))
    tl.store(o + 128, (acc1 * inv_l).to(OUT.dtype.element_ty))
    tl.store(o + 256, (acc2 * inv_l).to(OUT.dtype.element_ty))
    tl.store(o + 384, (acc3 * inv_l).to(OUT.dtype.element_ty))


@triton.jit
def _dequant(KV8, KVF, row, valid, col, ROW: tl.constexpr, BLOCK_N: tl.constexpr, WIDTH: tl.constexpr):
    # columns [col, col + WIDTH) of the selected rows as bf16: fp8 widened to fp32 (exact) times its
    # 128-column tile's scale, rounded once
    offs = tl.arange(0, WIDTH)
    f8 = tl.load(KV8 + row[:, None] * ROW + col + offs[None, :], mask=valid[:, None], other=0.0)
    offs_t = tl.arange(0, WIDTH // 128)
    scales = tl.load(KVF + row[:, None] * (ROW // 4) + 128 + col // 128 + offs_t[None, :],
                     mask=valid[:, None], other=0.0)
    k = tl.reshape(f8.to(tl.float32), (BLOCK_N, WIDTH // 128, 128)) * scales[:, :, None]
    return tl.reshape(k, (BLOCK_N, WIDTH)).to(tl.bfloat16)


@triton.jit
def _fp8_tiled(
    Q, KV8, KVF, KVB, IDX, OUT, LSE, sm_scale_log2,
    stride_qb, stride_qh, stride_ib,
    stride_ob, stride_os, stride_oh, stride_lb, stride_ls,
    topk, heads, tokens_per_split,
    ROW: tl.constexpr, D_ROPE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_DV: tl.constexpr, SPLIT: tl.constexpr, EVEN_H: tl.constexpr,
):
    # Grid: axis 0 enumerates (d_v slice, head tile, split) with the slice fastest, axis 1 the
    # request, so the programs that read the same rows run together and the later reads are L2 hits.
    pid = tl.program_id(0)
    b = tl.program_id(1)
    slices: tl.constexpr = 512 // BLOCK_DV
    head_tiles = tl.cdiv(heads, BLOCK_H)
    dvt = pid % slices
    ht = (pid // slices) % head_tiles
    sp = pid // (slices * head_tiles)
    offs_h = ht * BLOCK_H + tl.arange(0, BLOCK_H)
    if EVEN_H:
        mask_h = tl.full([BLOCK_H], 1, tl.int1)
    else:
        mask_h = offs_h < heads
    # this program's output columns [col0, col0 + BLOCK_DV) come first; with two slices the other
    # half of the latent columns only enters q.k (each slice computes the full score)
    col0 = dvt * BLOCK_DV
    col1 = (1 - dvt) * BLOCK_DV
    offs_c = tl.arange(0, BLOCK_DV)
    q_ptrs = Q + b * stride_qb + offs_h[:, None] * stride_qh + offs_c[None, :]
    q0 = tl.load(q_ptrs + col0, mask=mask_h[:, None], other=0.0)
    if slices == 2:
        q1 = tl.load(q_ptrs + col1, mask=mask_h[:, None], other=0.0)
    if D_ROPE > 0:
        offs_r = tl.arange(0, D_ROPE)
        q_rope = tl.load(Q + b * stride_qb + offs_h[:, None] * stride_qh + 512 + offs_r[None, :],
                         mask=mask_h[:, None], other=0.0)
    start = sp * tokens_per_split
    end = tl.minimum(start + tokens_per_split, topk)
    m_i = tl.full([BLOCK_H], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DV], dtype=tl.float32)
    # indices one tile ahead, so the gather's addresses are loop-carried and the pipeliner keeps
    # num_stages - 1 tiles of copies in flight (as in the bf16 package)
    offs_n = start + tl.arange(0, BLOCK_N)
    idx_next = tl.load(IDX + b * stride_ib + offs_n, mask=offs_n < end, other=-1)
    for n0 in range(start, end, BLOCK_N):
        idx = idx_next
        offs_n = n0 + BLOCK_N + tl.arange(0, BLOCK_N)
        idx_next = tl.load(IDX + b * stride_ib + offs_n, mask=offs_n < end, other=-1)
        valid = idx >= 0
        row = tl.where(valid, idx, 0).to(tl.int64)
        k0 = _dequant(KV8, KVF, row, valid, col0, ROW, BLOCK_N, BLOCK_DV)
        s = tl.dot(q0, tl.trans(k0))
        if slices == 2:
            k1 = _dequant(KV8, KVF, row, valid, col1, ROW, BLOCK_N, BLOCK_DV)
            s = tl.dot(q1, tl.trans(k1), s)
        if D_ROPE > 0:
            kr = tl.load(KVB + row[:, None] * (ROW // 2) + 264 + offs_r[None, :], mask=valid[:, None], other=0.0)
            s = tl.dot(q_rope, tl.trans(kr), s)
        s = tl.where(valid[None, :], s * sm_scale_log2, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(tl.bfloat16), k0, acc * alpha[:, None])
        m_i = m_new
    has_keys = l_i > 0.0
    out = acc * tl.where(has_keys, 1.0 / l_i, 0.0)[:, None]
    o = OUT + b * stride_ob + sp * stride_os + offs_h[:, None] * stride_oh + col0 + offs_c[None, :]
    if SPLIT:
        tl.store(o, out, mask=mask_h[:, None])
        # both slices computed the same scores; the first writes the log-sum-exp
        if dvt == 0:
            lse = tl.where(has_keys, m_i + tl.log2(l_i), float("-inf"))
            tl.store(LSE + b * stride_lb + sp * stride_ls + offs_h, lse, mask=mask_h)
    else:
        tl.store(o, out.to(OUT.dtype.element_ty), mask=mask_h[:, None])


@triton.jit(do_not_specialize=["num_splits"])
def _fp8_combine(
    O_PART, LSE, OUT,
    stride_pb, stride_ps, stride_ph, stride_lb, stride_ls, stride_ob, stride_oh,
    num_splits,
    D_OUT: tl.constexpr,
):
    # one program per (request, head): weigh each split's normalised partial by 2^(lse - max)
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_d = tl.arange(0, D_OUT)
    m_i = -1.0e30
    l_i = 0.0
    acc = tl.zeros([D_OUT], dtype=tl.float32)
    for sp in range(0, num_splits):
        lse = tl.load(LSE + b * stride_lb + sp * stride_ls + h)
        part = tl.load(O_PART + b * stride_pb + sp * stride_ps + h * stride_ph + offs_d)
        m_new = tl.maximum(m_i, lse)
        alpha = tl.exp2(m_i - m_new)
        w = tl.exp2(lse - m_new)
        acc = acc * alpha + w * part
        l_i = l_i * alpha + w
        m_i = m_new
    tl.store(OUT + b * stride_ob + h * stride_oh + offs_d,
             tl.where(l_i > 0.0, acc / l_i, 0.0).to(OUT.dtype.element_ty))


# --------------------------------------------------------------------------------------------
# Shapes, parameters, launch
# --------------------------------------------------------------------------------------------
def dims(shape: dict) -> tuple[int, int, int, int]:
    """``(heads, d_qk, d_rope, topk)`` of a manifest shape. ValueError unless ``d_v`` is 512 (the
    kernels hold four 128-column scale tiles) and ``d_qk - d_v`` is 0 or a power of two >= 16."""
    heads, d_qk, d_v, topk = int(shape["heads"]), int(shape["d_qk"]), int(shape["d_v"]), int(shape["topk"])
    if d_v != D_V:
        raise ValueError(f"d_v must be {D_V} (four scale tiles of {SCALE_TILE}) for these kernels, got {d_v}")
    d_rope = d_qk - d_v
    if d_rope and (d_rope < 16 or d_rope & (d_rope - 1)):
        raise ValueError(f"d_qk - d_v = {d_rope} must be 0 or a power of two >= 16")
    return heads, d_qk, d_rope, topk


def row_bytes(d_qk: int) -> int:
    """Bytes of one cache row: 512 fp8 values, four float32 scales, the bf16 rope columns."""
    return D_V + 4 * (D_V // SCALE_TILE) + 2 * (d_qk - D_V)


def _int_param(params: dict, name: str, default: int) -> int:
    value = params.get(name, default)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"parameter {name} must be an integer, got {value!r}") from None


def split_plan(params: dict, shape: dict, batch: int, sm_count: int) -> tuple[int, int]:
    """``(num_splits, tokens_per_split)`` of a ``split_k`` launch: ``"auto"`` takes the smallest
    count giving ``batch * head_tiles * splits >= 2 * sm_count`` programs; any count is capped at one
    ``BLOCK_N`` tile per split and recomputed from ``tokens_per_split`` (a multiple of ``BLOCK_N``)
    so that no split is empty. ValueError on a count below 1."""
    heads, _, _, topk = dims(shape)
    block_n = _int_param(params, "BLOCK_N", 32)
    head_tiles = triton.cdiv(heads, _int_param(params, "BLOCK_H", 16)) * (D_V // block_dv_of(params))
    n_tiles = triton.cdiv(topk, block_n)
    want = params.get("NUM_SPLITS", "auto")
    if want == "auto":
        splits = triton.cdiv(2 * sm_count, batch * head_tiles)
    else:
        splits = _int_param(params, "NUM_SPLITS", 1)
        if splits < 1:
            raise ValueError(f"NUM_SPLITS must be >= 1 or 'auto', got {want!r}")
    per_split = triton.cdiv(n_tiles, max(1, min(splits, n_tiles))) * block_n
    return triton.cdiv(topk, per_split), per_split


def block_dv_of(params: dict) -> int:
    """Output columns per program: 512 (default) or 256, when two programs share a head tile and
    split, each computing the full ``q . k`` but ``p . v`` and the accumulator for its half only.
    ValueError otherwise."""
    block_dv = _int_param(params, "BLOCK_DV", D_V)
    if block_dv not in (D_V, D_V // 2):
        raise ValueError(f"BLOCK_DV must be {D_V} or {D_V // 2}, got {block_dv}")
    return block_dv


_SM_COUNT: dict = {}
_WORKSPACE: dict = {}


def _sm_count(device) -> int:
    import torch

    key = str(device)
    if key not in _SM_COUNT:
        is_cuda = torch.device(device).type == "cuda"
        _SM_COUNT[key] = torch.cuda.get_device_properties(device).multi_processor_count if is_cuda else 4
    return _SM_COUNT[key]


def _workspace(device, batch: int, splits: int, heads: int):
    """fp32 partial outputs ``[batch, splits, heads, 512]`` and LSE ``[batch, splits, heads]``, one
    pair per size and device, shared by launches on one stream as an engine shares it across layers."""
    import torch

    key = (str(device), batch, splits, heads)
    if key not in _WORKSPACE:
        _WORKSPACE[key] = (torch.empty((batch, splits, heads, D_V), dtype=torch.float32, device=device),
                           torch.empty((batch, splits, heads), dtype=torch.float32, device=device))
    return _WORKSPACE[key]


def _impl(params: dict) -> str:
    impl = params.get("impl", "head_tiled")
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {', '.join(IMPLS)}, got {impl!r}")
    return impl


def launch(params: dict, inputs: dict):
    """Run one decode step of variant ``params`` on ``inputs`` (from ``make_inputs``); returns the
    output ``[batch, heads, 512]`` bf16, written into ``inputs["out"]`` when present.

    ``split_k`` uses a shared fp32 workspace of ``batch * splits * heads * 513 * 4`` bytes. Raises
    ValueError on an unknown ``impl``, a shape the kernels cannot tile, or cache rows whose width
    is not the layout's; Triton raises on resources the device lacks."""
    import torch

    impl = _impl(params)
    q, kv, idx = inputs["q"], inputs["kv"], inputs["indices"]
    batch, heads, d_qk = q.shape
    shape = {"heads": heads, "d_qk": d_qk, "d_v": int(inputs.get("d_v", D_V)), "topk": idx.shape[1]}
    _, _, d_rope, topk = dims(shape)
    row = row_bytes(d_qk)
    if kv.dtype != torch.uint8 or kv.dim() != 2 or kv.shape[1] != row or not kv.is_contiguous():
        raise ValueError(f"kv must be contiguous uint8 rows of {row} bytes, got {kv.dtype} {tuple(kv.shape)}")
    # three typed views of the same rows: the fp8 values, the float32 scales, the bf16 rope (a
    # pointer cast inside the kernel would hide the rows' 16-byte alignment from Triton, which then
    # loads byte by byte)
    views = (kv.view(torch.float8_e4m3fn), kv.view(torch.float32), kv.view(torch.bfloat16))
    scale = float(inputs.get("sm_scale") or 1.0 / math.sqrt(d_qk)) * LOG2E
    out = inputs.get("out")
    if out is None:
        out = torch.empty((batch, heads, D_V), dtype=torch.bfloat16, device=q.device)
    block_n = _int_param(params, "BLOCK_N", 32)
    warps, stages = _int_param(params, "num_warps", 4), _int_param(params, "num_stages", 2)
    if impl == "baseline":
        _fp8_baseline[(batch, heads)](
            q, *views, idx, out, scale, q.stride(0), q.stride(1), idx.stride(0),
            out.stride(0), out.stride(1), topk,
            ROW=row, D_ROPE=d_rope, BLOCK_N=block_n, num_warps=warps, num_stages=stages)
        return out
    block_h = _int_param(params, "BLOCK_H", 16)
    block_dv = block_dv_of(params)
    tiles = triton.cdiv(heads, block_h) * (D_V // block_dv)                 # head tiles x d_v slices
    if impl == "split_k":
        splits, per_split = split_plan(params, shape, batch, _sm_count(q.device))
    else:
        splits, per_split = 1, triton.cdiv(topk, block_n) * block_n
    consts = dict(ROW=row, D_ROPE=d_rope, BLOCK_H=block_h, BLOCK_N=block_n, BLOCK_DV=block_dv,
                  EVEN_H=heads % block_h == 0,
                  num_warps=warps, num_stages=stages)
    if splits == 1:
        _fp8_tiled[(tiles, batch)](
            q, *views, idx, out, out, scale, q.stride(0), q.stride(1), idx.stride(0),
            out.stride(0), 0, out.stride(1), 0, 0, topk, heads, per_split, SPLIT=False, **consts)
        return out
    part, lse = _workspace(q.device, batch, splits, heads)
    _fp8_tiled[(tiles * splits, batch)](
        q, *views, idx, part, lse, scale, q.stride(0), q.stride(1), idx.stride(0),
        part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
        topk, heads, per_split, SPLIT=True, **consts)
    _fp8_combine[(batch, heads)](
        part, lse, out, part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
        out.stride(0), out.stride(1), splits, D_OUT=D_V, num_warps=4)
    return out


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------
def quantize(latent, rope):
    """Cache rows from float values: ``latent [rows, 512]`` (any float dtype) and ``rope [rows,
    d_rope]`` bf16 (``d_rope`` may be 0) -> ``[rows, row_bytes]`` uint8. Each 128-column tile of a
    row gets the scale ``amax / 448`` (the largest e4m3 value; 1 for an all-zero tile) and its values
    are rounded to the nearest e4m3 of ``value / scale``."""
    import torch

    rows = latent.shape[0]
    tiles = latent.float().reshape(rows, D_V // SCALE_TILE, SCALE_TILE)
    amax = tiles.abs().amax(dim=-1)
    scales = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))                # [rows, 4]
    f8 = (tiles / scales[..., None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return torch.cat([f8.reshape(rows, D_V).view(torch.uint8),
                      scales.contiguous().view(torch.uint8),
                      rope.to(torch.bfloat16).contiguous().view(torch.uint8)], dim=1).contiguous()


def make_inputs(shape: dict, batch: int, device, seed: int, *, padding: int = 0) -> dict:
    """One decode step's inputs for ``shape`` and ``batch``: ``{"q", "kv", "indices", "out", "d_v",
    "sm_scale"}`` with a cache of ``batch * kv_len`` rows quantized from ``N(0, 1)`` values, ``q``
    with std ``Q_STD`` and ``topk`` distinct rows of each request's own ``kv_len`` rows (``-1`` in
    the last ``padding`` positions). Deterministic in ``seed``."""
    return make_rotation(shape, batch, device, seed, copies=1, padding=padding)[0]


def make_rotation(shape: dict, batch: int, device, seed: int, copies: int, *, padding: int = 0) -> list[dict]:
    """``copies`` input sets sharing one cache pool for cold-cache timing: ``W = max(batch,
    min(copies * batch, 4 * ceil(copies * batch * topk / kv_len)))`` windows of ``kv_len`` rows;
    request ``b`` of copy ``c`` selects ``topk`` distinct rows of window ``(c * batch + b) mod W``,
    so consecutive copies read different rows. Allocates ``W * kv_len * row_bytes`` bytes of cache
    on ``device``; deterministic in ``seed``."""
    import torch

    heads, d_qk, d_rope, topk = dims(shape)
    kv_len = int(shape.get("kv_len", topk))
    if kv_len < topk:
        raise ValueError(f"kv_len ({kv_len}) must be >= topk ({topk})")
    copies = max(1, int(copies))
    windows = max(batch, min(copies * batch, math.ceil(copies * batch * topk / kv_len) * 4))
    gen = torch.Generator(device=device).manual_seed(int(seed))
    chunks = []
    for start in range(0, windows * kv_len, 1 << 20):                 # bounds the fp32 staging
        n = min(1 << 20, windows * kv_len - start)
        latent = torch.randn((n, D_V), generator=gen, device=device)
        rope = torch.randn((n, d_rope), generator=gen, device=device).to(torch.bfloat16)
        chunks.append(quantize(latent, rope))
    kv = torch.cat(chunks) if len(chunks) > 1 else chunks[0]
    sets = []
    for c in range(copies):
        q = (torch.randn((batch, heads, d_qk), generator=gen, device=device) * Q_STD).to(torch.bfloat16)
        window = (c * batch + torch.arange(batch, device=device)) % windows
        picks = torch.rand((batch, kv_len), generator=gen, device=device).argsort(dim=1)[:, :topk]
        indices = (window[:, None] * kv_len + picks).to(torch.int32)
        if padding:
            indices[:, topk - int(padding):] = -1
        sets.append({"q": q, "kv": kv, "indices": indices,
                     "out": torch.empty((batch, heads, D_V), dtype=torch.bfloat16, device=device),
                     "d_v": D_V, "sm_scale": 1.0 / math.sqrt(d_qk)})
    return sets


# --------------------------------------------------------------------------------------------
# Ahead-of-time compile description (no GPU)
# --------------------------------------------------------------------------------------------
def compile_specs(params: dict, shape: dict, *, batch: int = 8, sm_count: int = 132) -> list[dict]:
    """The Triton kernels a launch of ``params`` on ``shape`` runs, main kernel first, as
    ``{"name", "fn", "signature", "constexprs", "int_values", "num_warps", "num_stages"}`` (plus
    ``do_not_specialize`` for the combine): ``int_values`` are the integer arguments a launch at
    ``batch`` on ``sm_count`` SMs passes, which the runner specialises on as Triton's launcher does."""
    impl = _impl(params)
    heads, d_qk, d_rope, topk = dims(shape)
    warps, stages = _int_param(params, "num_warps", 4), _int_param(params, "num_stages", 2)
    block_n = _int_param(params, "BLOCK_N", 32)
    base = {"stride_qb": heads * d_qk, "stride_qh": d_qk, "stride_ib": topk}
    cache = {"KV8": "*fp8e4nv", "KVF": "*fp32", "KVB": "*bf16"}
    if impl == "baseline":
        sig = {"Q": "*bf16", **cache, "IDX": "*i32", "OUT": "*bf16", "sm_scale_log2": "fp32"}
        ints = dict(base, stride_ob=heads * D_V, stride_oh=D_V, topk=topk)
        sig.update({k: "i32" for k in ints})
        return [{"name": "baseline", "fn": _fp8_baseline, "signature": sig, "int_values": ints,
                 "constexprs": {"ROW": row_bytes(d_qk), "D_ROPE": d_rope, "BLOCK_N": block_n}, "num_warps": warps, "num_stages": stages}]
    block_h = _int_param(params, "BLOCK_H", 16)
    splits, per_split = (split_plan(params, shape, batch, sm_count) if impl == "split_k"
                         else (1, triton.cdiv(topk, block_n) * block_n))
    split = splits > 1
    sig = {"Q": "*bf16", **cache, "IDX": "*i32", "OUT": "*fp32" if split else "*bf16",
           "LSE": "*fp32" if split else "*bf16", "sm_scale_log2": "fp32"}
    if split:
        outs = {"stride_ob": splits * heads * D_V, "stride_os": heads * D_V, "stride_oh": D_V,
                "stride_lb": splits * heads, "stride_ls": heads}
    else:
        outs = {"stride_ob": heads * D_V, "stride_os": 0, "stride_oh": D_V, "stride_lb": 0, "stride_ls": 0}
    ints = dict(base, **outs, topk=topk, heads=heads, tokens_per_split=per_split)
    sig.update({k: "i32" for k in ints})
    specs = [{"name": impl, "fn": _fp8_tiled, "signature": sig, "int_values": ints,
              "constexprs": {"ROW": row_bytes(d_qk), "D_ROPE": d_rope, "BLOCK_H": block_h, "BLOCK_N": block_n,
                             "BLOCK_DV": block_dv_of(params), "SPLIT": split, "EVEN_H": heads % block_h == 0},
              "num_warps": warps, "num_stages": stages}]
    if split:
        csig = {"O_PART": "*fp32", "LSE": "*fp32", "OUT": "*bf16"}
        cints = {"stride_pb": splits * heads * D_V, "stride_ps": heads * D_V, "stride_ph": D_V,
                 "stride_lb": splits * heads, "stride_ls": heads, "stride_ob": heads * D_V, "stride_oh": D_V,
                 "num_splits": splits}
        csig.update({k: "i32" for k in cints})
        specs.append({"name": "combine", "fn": _fp8_combine, "signature": csig, "int_values": cints,
                      "do_not_specialize": ["num_splits"], "constexprs": {"D_OUT": D_V},
                      "num_warps": 4, "num_stages": 2})
    return specs
