"""PyTorch reference for sparse MLA decode attention (top-k selected KV positions).

Layout (the one DeepSeek-style engines use for sparse MLA decode: a flat, paged latent cache
addressed by global row ids after the page table has been applied):

* ``q``        ``[batch, heads, d_qk]`` bf16: one decode query per request; columns
  ``[0, d_v)`` are the latent ("nope") part, ``[d_v, d_qk)`` the rope part (V3.2: 512 + 64).
* ``kv``       ``[num_rows, d_qk]`` bf16: the latent cache, one row per cached token. The first
  ``d_v`` columns of a row are both its key (nope part) and its value, so a selected row is read
  once for K and V.
* ``indices``  ``[batch, topk]`` int32: global row ids into ``kv`` chosen by the indexer for each
  request; ``-1`` marks padding (a request with fewer selected tokens) and is masked out.
* output       ``[batch, heads, d_v]`` bf16.

Scores are ``q . k * sm_scale`` with ``sm_scale = 1 / sqrt(d_qk)`` unless ``inputs["sm_scale"]``
says otherwise; the softmax and the weighted sum are in fp32. A request whose indices are all
``-1`` has no keys: its output is defined as zeros (a softmax over nothing would be NaN).
"""
from __future__ import annotations

import math


def reference(inputs: dict):
    """Return the exact attention output for ``inputs`` (see the module docstring for shapes).

    Gathers the selected rows per request (``kv[indices]``), computes fp32 scores and an fp32
    softmax over the selected tokens (padding masked), and returns the softmax-weighted sum of
    the rows' first ``d_v`` columns as bf16 ``[batch, heads, d_v]``. Works on CPU and GPU
    tensors; memory is ``batch * topk * d_qk * 4`` bytes for the gathered rows plus
    ``batch * heads * topk * 4`` for the scores. No side effects.
    """
    import torch

    q, kv, indices = inputs["q"], inputs["kv"], inputs["indices"]
    d_qk = q.shape[-1]
    d_v = int(inputs.get("d_v", d_qk))
    sm_scale = float(inputs.get("sm_scale") or 1.0 / math.sqrt(d_qk))
    valid = indices >= 0                                            # [B, K]
    rows = kv[indices.clamp(min=0).long()].float()                   # [B, K, Dqk]
    scores = torch.einsum("bhd,bkd->bhk", q.float(), rows) * sm_scale
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    probs = torch.nan_to_num(probs, nan=0.0)                         # all-padding requests
    out = torch.einsum("bhk,bkd->bhd", probs, rows[..., :d_v])
    return out.to(torch.bfloat16)
