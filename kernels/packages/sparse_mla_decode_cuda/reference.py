"""PyTorch reference of the CUDA baseline: exact sparse MLA decode attention.

Inputs (dict): ``q [batch, heads, d_qk]`` bf16, ``kv [rows, d_qk]`` bf16, ``indices [batch, topk]``
int32 (global row ids, ``-1`` = padding), optional ``d_v`` (default ``d_qk``) and ``sm_scale``
(default ``1 / sqrt(d_qk)``). Output ``[batch, heads, d_v]`` bf16: the fp32 softmax over the
selected rows' scores, applied to their first ``d_v`` columns; a request with no selected row gives
zeros.
"""
from __future__ import annotations

import math


def reference(inputs: dict):
    """Gather each request's selected rows, score them against every head's query in fp32, softmax
    over the valid ones and sum the rows' value columns. Memory: ``batch * topk * d_qk * 4`` bytes
    for the gathered rows plus ``batch * heads * topk * 4`` for the scores. CPU or GPU tensors."""
    import torch

    q, kv, indices = inputs["q"], inputs["kv"], inputs["indices"]
    d_qk = q.shape[-1]
    d_v = int(inputs.get("d_v", d_qk))
    scale = float(inputs.get("sm_scale") or 1.0 / math.sqrt(d_qk))
    valid = indices >= 0
    rows = kv[indices.clamp(min=0).long()].float()
    scores = torch.einsum("bhd,bkd->bhk", q.float(), rows) * scale
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return torch.einsum("bhk,bkd->bhd", weights, rows[..., :d_v]).to(torch.bfloat16)
