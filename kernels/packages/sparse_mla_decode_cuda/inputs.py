"""Benchmark inputs of the CUDA sparse MLA decode package (no Triton needed).

The tensors are, value for value, those of the Triton package ``sparse_mla_decode``'s
``make_inputs`` / ``make_rotation`` for the same shape, batch, device and seed (same generator,
same draw order; ``kernels/tests/test_cuda_harness_gpu.py`` checks it on the CPU), so the two
packages' results compare row for row. The package keeps its own copy so that an exported job
(only this directory's ``sources``) runs on a host without the other package or Triton.
"""
from __future__ import annotations

import math

# q scale: a peaked softmax (score std about 2.5), so a 2e-2 absolute tolerance catches a wrong
# kernel; with unit-variance q the attention is nearly uniform over thousands of rows.
Q_STD = 2.5


def make_inputs(shape: dict, batch: int, device, seed: int, *, padding: int = 0) -> dict:
    """One decode step's inputs: ``{"q" [batch, heads, d_qk] bf16, "kv" [rows, d_qk] bf16, "indices"
    [batch, topk] int32 (distinct rows of the request's own ``kv_len`` window; ``-1`` in the last
    ``padding`` positions), "out" [batch, heads, d_v] bf16, "d_v", "sm_scale" = 1/sqrt(d_qk)}``.
    Allocates about ``batch * kv_len * d_qk * 2`` bytes on ``device``. ValueError if ``kv_len <
    topk``."""
    return make_rotation(shape, batch, device, seed, copies=1, padding=padding)[0]


def make_rotation(shape: dict, batch: int, device, seed: int, copies: int, *, padding: int = 0) -> list[dict]:
    """``copies`` independent input sets sharing one cache pool of ``W = max(batch, min(copies *
    batch, 4 * ceil(copies * batch * topk / kv_len)))`` windows of ``kv_len`` rows; request ``b`` of
    copy ``c`` reads window ``(c * batch + b) mod W``, so consecutive copies touch different rows
    (cold-L2 timing). Fields as in ``make_inputs``."""
    import torch

    heads, d_qk, d_v, topk = int(shape["heads"]), int(shape["d_qk"]), int(shape["d_v"]), int(shape["topk"])
    kv_len = int(shape.get("kv_len", topk))
    if kv_len < topk:
        raise ValueError(f"kv_len ({kv_len}) must be >= topk ({topk})")
    copies = max(1, int(copies))
    windows = max(batch, min(copies * batch, math.ceil(copies * batch * topk / kv_len) * 4))
    gen = torch.Generator(device=device).manual_seed(int(seed))
    kv = torch.randn((windows * kv_len, d_qk), generator=gen, device=device, dtype=torch.bfloat16)
    sets = []
    for c in range(copies):
        q = (torch.randn((batch, heads, d_qk), generator=gen, device=device) * Q_STD).to(torch.bfloat16)
        window = (c * batch + torch.arange(batch, device=device)) % windows
        picks = torch.rand((batch, kv_len), generator=gen, device=device).argsort(dim=1)[:, :topk]
        indices = (window[:, None] * kv_len + picks).to(torch.int32)
        if padding:
            indices[:, topk - int(padding):] = -1
        sets.append({"q": q, "kv": kv, "indices": indices,
                     "out": torch.empty((batch, heads, d_v), dtype=torch.bfloat16, device=device),
                     "d_v": d_v, "sm_scale": 1.0 / math.sqrt(d_qk)})
    return sets
