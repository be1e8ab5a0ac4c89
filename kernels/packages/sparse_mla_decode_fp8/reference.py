"""PyTorch reference for sparse MLA decode attention over an FP8 latent cache.

Cache layout (DeepSeek V3.2's FP8 sparse-attention cache, as FlashMLA's README describes it: 656
bytes a token for 512 + 64 columns). One row per cached token, ``row_bytes = d_v + 4 * (d_v /
128) + 2 * (d_qk - d_v)`` bytes:

* bytes ``[0, d_v)``: the latent ("nope") columns as float8 e4m3 (``torch.float8_e4m3fn``, max 448);
* the next ``4 * d_v / 128`` bytes: one float32 scale per 128 latent columns; the value of column
  ``c`` is ``fp8[c] * scale[c // 128]``;
* the last ``2 * (d_qk - d_v)`` bytes: the rope columns in bf16 (V3.2: 64; none for V4-Flash).

Inputs (``make_inputs`` in ``kernel.py`` builds them):

* ``q``        ``[batch, heads, d_qk]`` bf16;
* ``kv``       ``[num_rows, row_bytes]`` uint8, the rows above;
* ``indices``  ``[batch, topk]`` int32 global row ids, ``-1`` = padding (masked out);
* ``d_v`` (int) and ``sm_scale`` (float, default ``1 / sqrt(d_qk)``).

Output ``[batch, heads, d_v]`` bf16. A request whose indices are all ``-1`` gets zeros.
"""
from __future__ import annotations

import math

SCALE_TILE = 128        # latent columns per float32 scale


def row_bytes(d_qk: int, d_v: int) -> int:
    """Bytes of one cache row: ``d_v`` fp8 values, ``d_v / 128`` float32 scales, ``d_qk - d_v``
    bf16 rope columns. ValueError unless ``d_v`` is a positive multiple of 128 and ``d_qk >= d_v``."""
    if d_v <= 0 or d_v % SCALE_TILE or d_qk < d_v:
        raise ValueError(f"d_v must be a positive multiple of {SCALE_TILE} and d_qk >= d_v (got d_qk={d_qk}, d_v={d_v})")
    return d_v + 4 * (d_v // SCALE_TILE) + 2 * (d_qk - d_v)


def dequantize(rows, d_qk: int, d_v: int):
    """``rows [..., row_bytes]`` uint8 -> ``[..., d_qk]`` float32 values (latent ``fp8 x scale``,
    then the rope columns). Exact: every fp8 and bf16 value is a float32."""
    import torch

    if rows.shape[-1] != row_bytes(d_qk, d_v):
        raise ValueError(f"cache rows have {rows.shape[-1]} bytes, the layout needs {row_bytes(d_qk, d_v)}")
    lead = rows.shape[:-1]
    tiles = d_v // SCALE_TILE
    latent = rows[..., :d_v].contiguous().view(torch.float8_e4m3fn).float()
    scales = rows[..., d_v:d_v + 4 * tiles].contiguous().view(torch.float32)           # [..., tiles]
    latent = (latent.reshape(*lead, tiles, SCALE_TILE) * scales[..., None]).reshape(*lead, d_v)
    if d_qk == d_v:
        return latent
    rope = rows[..., d_v + 4 * tiles:].contiguous().view(torch.bfloat16).float()
    return torch.cat([latent, rope], dim=-1)


def reference(inputs: dict):
    """Exact attention output for ``inputs`` (see the module docstring): gathers the selected rows,
    dequantizes them to float32, computes fp32 scores ``q . k * sm_scale`` and an fp32 softmax over
    the valid selected tokens, and returns the weighted sum of the latent columns as bf16
    ``[batch, heads, d_v]``. Memory: ``batch * topk * d_qk * 4`` bytes for the rows plus ``batch *
    heads * topk * 4`` for the scores. No side effects."""
    import torch

    q, kv, indices = inputs["q"], inputs["kv"], inputs["indices"]
    d_qk = q.shape[-1]
    d_v = int(inputs["d_v"])
    sm_scale = float(inputs.get("sm_scale") or 1.0 / math.sqrt(d_qk))
    valid = indices >= 0                                                      # [B, K]
    rows = dequantize(kv[indices.clamp(min=0).long()], d_qk, d_v)             # [B, K, d_qk]
    scores = torch.einsum("bhd,bkd->bhk", q.float(), rows) * sm_scale
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    probs = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return torch.einsum("bhk,bkd->bhd", probs, rows[..., :d_v]).to(torch.bfloat16)
