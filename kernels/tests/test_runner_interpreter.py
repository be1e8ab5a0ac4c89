"""The three Triton implementations against the reference, run by Triton's CPU interpreter on
tiny shapes (the same kernel source the GPU runs; no timing here).

The interpreter must be switched on before Triton is first imported (Triton's own library
functions are decorated at import), so each check runs in a fresh Python process."""
from pathlib import Path

import pytest

from kernels.tests.test_runner_compile import run_script

pytest.importorskip("torch")
pytest.importorskip("triton")

REPO = Path(__file__).resolve().parents[2]
ROPE = {"name": "tiny-rope", "heads": 32, "d_qk": 80, "d_v": 64, "topk": 40, "kv_len": 96}
NO_ROPE = {"name": "tiny", "heads": 16, "d_qk": 64, "d_v": 64, "topk": 48, "kv_len": 64}

SCRIPT = r"""
import json, sys
from kernels.runner import interpreter
interpreter.enable()
import torch
from kernels.runner.bench import compare
from kernels.runner.package import load_package
pkg = load_package("kernels/packages/sparse_mla_decode")
module, reference = pkg.load_module(pkg.entry), pkg.reference_fn()
cases = json.loads(sys.argv[1])
out = []
for case in cases:
    inputs = module.make_inputs(case["shape"], case["batch"], "cpu", seed=case["seed"], padding=case["padding"])
    for b, start in case.get("blank", []):               # indices[b, start:] = -1
        inputs["indices"][b, start:] = -1
    result = module.launch(case["params"], inputs)
    ok, max_abs, max_rel, reason = compare(torch, result, reference(inputs), pkg.tolerance["atol"], pkg.tolerance["rtol"])
    out.append({"ok": ok, "max_abs": max_abs, "reason": reason, "padding": int((inputs["indices"] == -1).sum()),
                "zero_rows": [int(torch.count_nonzero(result[b])) == 0 for b in range(result.shape[0])]})
print(json.dumps(out))
"""


def run_cases(cases: list[dict]) -> list[dict]:
    return run_script(SCRIPT, cases)


PARAMS = [
    {"impl": "baseline", "BLOCK_N": 16},
    {"impl": "head_tiled", "BLOCK_H": 16, "BLOCK_N": 16},
    {"impl": "head_tiled", "BLOCK_H": 32, "BLOCK_N": 32},
    {"impl": "split_k", "BLOCK_H": 16, "BLOCK_N": 16, "NUM_SPLITS": "auto"},
    {"impl": "split_k", "BLOCK_H": 16, "BLOCK_N": 16, "NUM_SPLITS": 2},
    # d_v split over 2 and 4 programs that each recompute the full q.k
    {"impl": "head_tiled", "BLOCK_H": 16, "BLOCK_N": 16, "BLOCK_DV": 32},
    {"impl": "split_k", "BLOCK_H": 32, "BLOCK_N": 16, "BLOCK_DV": 16, "NUM_SPLITS": 2},
]


@pytest.mark.slow
def test_it_matches_the_reference_for_every_implementation_with_padding():
    cases = [{"shape": shape, "batch": 2, "seed": 7, "padding": 5, "params": params}
             for shape in (ROPE, NO_ROPE) for params in PARAMS]
    for case, result in zip(cases, run_cases(cases)):
        label = f"{case['shape']['name']} {case['params']}"
        assert result["padding"] == 2 * 5, label
        assert result["ok"], f"{label}: {result['reason']}"
        assert result["max_abs"] <= 0.02, label


@pytest.mark.slow
def test_it_gives_zeros_for_a_request_with_no_tokens_and_skips_empty_splits():
    # request 0 selected nothing; request 1 only its first 16 tokens, so splits 2 and 3 are empty
    cases = [{"shape": NO_ROPE, "batch": 2, "seed": 1, "padding": 0, "blank": [[0, 0], [1, 16]],
              "params": {"impl": impl, "BLOCK_H": 16, "BLOCK_N": 16, "NUM_SPLITS": splits}}
             for impl, splits in (("split_k", 3), ("head_tiled", "auto"), ("baseline", "auto"))]
    for case, result in zip(cases, run_cases(cases)):
        assert result["ok"], f"{case['params']}: {result['reason']}"
        assert result["zero_rows"] == [True, False], case["params"]


def test_it_plans_splits_to_fill_the_gpu_twice():
    from kernels.runner.package import load_package

    pkg = load_package(REPO / "kernels" / "packages" / "sparse_mla_decode")
    module = pkg.load_module(pkg.entry, tag="_plan")
    v4, v32 = pkg.shape("v4-flash"), pkg.shape("v32")
    auto = {"impl": "split_k", "BLOCK_H": 64, "BLOCK_N": 32, "NUM_SPLITS": "auto"}
    # v4-flash, batch 1, one 64-head tile: 264 programs wanted, capped at 640 / 32 = 20 tiles
    assert module.split_plan(auto, v4, 1, 132) == (20, 32)
    # v32, batch 8, two head tiles: ceil(264 / 16) = 17 splits of ceil(64 / 17) = 4 tiles -> 16 splits
    assert module.split_plan(auto, v32, 8, 132) == (16, 128)
    # v32, batch 64: 128 programs, ceil(264 / 128) = 3 splits of 22 tiles -> 3 splits
    assert module.split_plan(auto, v32, 64, 132) == (3, 704)
    # 16-head tiles at batch 64: 512 programs already fill two waves
    assert module.split_plan(dict(auto, BLOCK_H=16), v32, 64, 132) == (1, 2048)
    assert module.split_plan(dict(auto, NUM_SPLITS=4), v32, 64, 132) == (4, 512)
    # two d_v slices double the programs: v32, batch 8: 32 programs, ceil(264 / 32) = 9 splits of
    # ceil(64 / 9) = 8 tiles -> 8 splits (16 with whole rows, above)
    assert module.split_plan(dict(auto, BLOCK_DV=256), v32, 8, 132) == (8, 256)
    with pytest.raises(ValueError, match="BLOCK_DV = 96 must be"):
        module.split_plan(dict(auto, BLOCK_DV=96), v32, 1, 132)
    with pytest.raises(ValueError, match="impl must be one of"):
        module.launch({"impl": "nope"}, {})
    with pytest.raises(ValueError, match="NUM_SPLITS must be"):
        module.split_plan(dict(auto, NUM_SPLITS=0), v32, 1, 132)
