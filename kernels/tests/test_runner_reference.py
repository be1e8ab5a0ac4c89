"""The flagship's PyTorch reference on tiny CPU tensors against a plain loop, and the bench's
element-wise comparison."""
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kernels.runner import bench  # noqa: E402
from kernels.runner.package import load_package  # noqa: E402

FLAGSHIP = Path(__file__).resolve().parents[1] / "packages" / "sparse_mla_decode"


def naive(q, kv, indices, d_v):
    """One request, one head, one selected token at a time, in float64."""
    batch, heads, d_qk = q.shape
    out = torch.zeros(batch, heads, d_v, dtype=torch.float64)
    for b in range(batch):
        rows = [int(i) for i in indices[b] if int(i) >= 0]
        for h in range(heads):
            if not rows:
                continue
            scores = [float((q[b, h].double() * kv[r].double()).sum()) / math.sqrt(d_qk) for r in rows]
            top = max(scores)
            weights = [math.exp(s - top) for s in scores]
            total = sum(weights)
            for w, r in zip(weights, rows):
                out[b, h] += (w / total) * kv[r, :d_v].double()
    return out


def _reference():
    return load_package(FLAGSHIP).reference_fn()


def test_it_matches_a_plain_loop_with_a_rope_part_and_padding():
    gen = torch.Generator().manual_seed(3)
    q = (torch.randn(2, 3, 24, generator=gen) * 2).bfloat16()
    kv = torch.randn(40, 24, generator=gen).bfloat16()
    indices = torch.tensor([[5, 0, 39, 17, -1, -1], [1, 2, 3, 30, 31, 12]], dtype=torch.int32)
    inputs = {"q": q, "kv": kv, "indices": indices, "d_v": 16}
    out = _reference()(inputs)
    assert out.shape == (2, 3, 16) and out.dtype == torch.bfloat16
    expected = naive(q, kv, indices, 16)
    assert torch.allclose(out.double(), expected, atol=1e-2, rtol=1e-2)
    # masking -1 is the same as leaving those tokens out
    alone = {"q": q[:1], "kv": kv, "indices": indices[:1, :4], "d_v": 16}
    assert torch.equal(_reference()(alone), out[:1])


def test_it_returns_zeros_for_a_request_with_no_selected_tokens():
    q = torch.randn(2, 2, 16).bfloat16()
    kv = torch.randn(8, 16).bfloat16()
    indices = torch.tensor([[-1, -1, -1], [0, 1, -1]], dtype=torch.int32)
    out = _reference()({"q": q, "kv": kv, "indices": indices, "d_v": 16})
    assert torch.count_nonzero(out[0]) == 0
    assert torch.isfinite(out).all()
    assert torch.allclose(out[1].double(), naive(q, kv, indices, 16)[1], atol=1e-2, rtol=1e-2)


def test_it_compares_outputs_elementwise_and_says_why_a_variant_is_wrong():
    ref = torch.tensor([[1.0, -2.0], [0.5, 0.0]])
    ok, max_abs, max_rel, reason = bench.compare(torch, ref + 0.01, ref, atol=0.02, rtol=0.0)
    assert ok and max_abs == pytest.approx(0.01) and max_rel == pytest.approx(0.005) and reason is None
    ok, max_abs, _, reason = bench.compare(torch, ref + torch.tensor([[0.0, 0.0], [0.0, 0.5]]), ref, 0.02, 0.02)
    assert not ok and max_abs == pytest.approx(0.5)
    assert "1 of 4 elements" in reason
    ok, _, _, reason = bench.compare(torch, ref * float("nan"), ref, 0.02, 0.02)
    assert not ok and "NaN" in reason
    ok, _, _, reason = bench.compare(torch, ref[:1], ref, 0.02, 0.02)
    assert not ok and "shape" in reason
