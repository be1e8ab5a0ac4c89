"""A planted wrong variant goes through the runner's own per-variant path (``bench_variant``: launch
once, compare with the package reference, and only then time) and is caught by the correctness
check and never timed. CPU only: the planted kernels are PyTorch functions on the CPU, the
reference is the flagship package's, and the timing loop is replaced by one that fails the test if
it is ever entered; the same path runs on a GPU node for every real variant."""
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from kernels.runner import bench  # noqa: E402
from kernels.runner.package import load_package  # noqa: E402

FLAGSHIP = Path(__file__).resolve().parents[1] / "packages" / "sparse_mla_decode"
DEVICE = {"hbm_gbps": 4000.0, "bf16_tflops": 800.0}
Q_STD = 2.5   # as the flagship's make_inputs (kernel.py): a peaked softmax, outputs of order 1


class _CpuTorch:
    """PyTorch as ``bench_variant`` receives it, with the stream synchronisation a no-op on the CPU."""
    cuda = SimpleNamespace(synchronize=lambda: None)

    def __getattr__(self, name):
        return getattr(torch, name)


CPU_TORCH = _CpuTorch()


@pytest.fixture
def setup(monkeypatch):
    pkg = load_package(FLAGSHIP)
    reference = pkg.reference_fn()
    shape = dict(pkg.shape("v32"), kv_len=pkg.shape("v32")["topk"] * 2)
    gen = torch.Generator().manual_seed(3)
    heads, d_qk, topk = shape["heads"], shape["d_qk"], shape["topk"]
    kv = torch.randn((2 * shape["kv_len"], d_qk), generator=gen).bfloat16()
    inputs = {"q": (torch.randn((2, heads, d_qk), generator=gen) * Q_STD).bfloat16(), "kv": kv,
              "indices": torch.randperm(kv.shape[0], generator=gen)[: 2 * topk].view(2, topk).to(torch.int32),
              "d_v": shape["d_v"], "sm_scale": d_qk ** -0.5}
    inputs["indices"][1, -100:] = -1
    ref = reference(inputs)
    timed = []

    def no_timing(*args, **kwargs):
        timed.append(args)
        raise AssertionError("a variant that failed the correctness check reached the timing loop")

    monkeypatch.setattr(bench, "time_launches", no_timing)
    return pkg, shape, inputs, ref, timed


@pytest.mark.parametrize("plant, expect", [
    # 5 % too large everywhere: small and systematic, the kind a wrong constant gives
    (lambda ref, inputs: ref.float() * 1.05, "wrong result"),
    # a tile of heads never written (an off-by-one head mask)
    (lambda ref, inputs: torch.cat([ref[:, :-16], torch.zeros_like(ref[:, -16:])], dim=1), "wrong result"),
    (lambda ref, inputs: ref.float() * float("nan"), "NaN"),
    (lambda ref, inputs: ref[:, :, :256], "shape"),
], ids=["scaled", "missing-heads", "nan", "short-rows"])
def test_a_planted_wrong_variant_is_caught_and_never_timed(setup, plant, expect):
    pkg, shape, inputs, ref, timed = setup
    calls = []

    def planted(inp):
        calls.append(1)
        return plant(ref, inp).to(torch.bfloat16)

    row = bench.bench_variant(CPU_TORCH, None, {"variant_id": "planted", "params": {}}, shape, 2, [inputs], ref, pkg,
                              DEVICE, run_one=planted)
    assert row["correct"] is False and expect in row["error"]
    assert row["median_us"] is None and row["reps"] == 0 and row["gbps"] is None and row["timing"] is None
    assert calls == [1] and timed == []        # launched once for the check, never timed


def test_a_correct_variant_does_go_on_to_timing(setup):
    """The control: the same path with the reference's own output passes the check and enters the
    timing loop (which fails here by design)."""
    pkg, shape, inputs, ref, timed = setup
    row = bench.bench_variant(CPU_TORCH, None, {"variant_id": "right", "params": {}}, shape, 2, [inputs], ref, pkg,
                              DEVICE, run_one=lambda inp: ref.clone())
    assert row["correct"] is True and len(timed) == 1
    assert "timing failed" in row["error"] and row["median_us"] is None
