"""The FP8-cache package ``sparse_mla_decode_fp8``: its cache layout (quantize in ``kernel.py``,
dequantize in ``reference.py``, written independently), its three implementations against the
reference under Triton's CPU interpreter (the kernel source the GPU runs), its build facts for
sm_90a without a GPU, and its manifest as the control plane reads it."""
import json
from pathlib import Path

import pytest

from kernels.runner.package import load_package
from kernels.tests.test_runner_compile import run_runner, run_script

REPO = Path(__file__).resolve().parents[2]
FP8 = REPO / "kernels" / "packages" / "sparse_mla_decode_fp8"
ROPE = {"name": "tiny-rope", "heads": 32, "d_qk": 576, "d_v": 512, "topk": 40, "kv_len": 96}
NO_ROPE = {"name": "tiny", "heads": 16, "d_qk": 512, "d_v": 512, "topk": 48, "kv_len": 64}


def _modules():
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    pkg = load_package(FP8)
    return pkg, pkg.load_module(pkg.entry, tag="_fp8test"), pkg.load_module("reference.py", tag="_fp8test")


def test_the_cache_rows_hold_fp8_values_scales_and_bf16_rope():
    import torch

    pkg, kernel, reference = _modules()
    assert reference.row_bytes(576, 512) == 656 == kernel.row_bytes(576)       # V3.2: 512 + 16 + 128
    assert reference.row_bytes(512, 512) == 528 == kernel.row_bytes(512)
    gen = torch.Generator().manual_seed(5)
    latent = torch.randn((6, 512), generator=gen) * torch.tensor([0.01, 1, 100, 3, 0.5, 7])[:, None]
    latent[5, 128:256] = 0.0                                                    # an all-zero tile
    rope = torch.randn((6, 64), generator=gen).to(torch.bfloat16)
    rows = kernel.quantize(latent, rope)
    assert rows.dtype == torch.uint8 and tuple(rows.shape) == (6, 656)
    scales = rows[:, 512:528].contiguous().view(torch.float32)
    amax = latent.reshape(6, 4, 128).abs().amax(-1)
    assert torch.equal(scales[5, 1], torch.tensor(1.0))                        # zero tile: scale 1
    keep = amax > 0
    assert torch.allclose(scales[keep], amax[keep] / 448.0)
    back = reference.dequantize(rows, 576, 512)
    assert tuple(back.shape) == (6, 576)
    # e4m3 keeps 3 mantissa bits: round-to-nearest is within 2^-4 of a value, relative, above the
    # subnormal range (2^-6 x scale); below it the error is at most half a subnormal step (2^-10)
    err = (back[:, :512] - latent).abs().reshape(6, 4, 128)
    bound = torch.maximum(latent.abs().reshape(6, 4, 128) * 2**-4, scales[..., None] * 2**-10)
    assert bool((err <= bound * 1.0001).all())
    assert torch.equal(back[5, 128:256], torch.zeros(128))
    assert torch.equal(back[:, 512:], rope.float())                             # rope is bf16, exact
    with pytest.raises(ValueError, match="656"):
        reference.dequantize(rows[:, :600], 576, 512)


def test_it_plans_splits_and_refuses_shapes_it_cannot_tile():
    pkg, kernel, _ = _modules()
    v4, v32 = pkg.shape("v4-flash"), pkg.shape("v32")
    auto = {"impl": "split_k", "BLOCK_H": 64, "BLOCK_N": 32, "NUM_SPLITS": "auto"}
    assert kernel.split_plan(auto, v4, 1, 132) == (20, 32)                     # 264 wanted, 20 tiles
    assert kernel.split_plan(auto, v32, 64, 132) == (3, 704)                   # 128 programs -> 3 splits
    assert kernel.split_plan(dict(auto, NUM_SPLITS=4), v32, 64, 132) == (4, 512)
    # two d_v slices double the programs: v32 batch 8, 32 programs -> 9 splits of 8 tiles -> 8 splits
    assert kernel.split_plan(dict(auto, BLOCK_DV=256), v32, 8, 132) == (8, 256)
    with pytest.raises(ValueError, match="BLOCK_DV must be 512 or 256"):
        kernel.split_plan(dict(auto, BLOCK_DV=128), v32, 8, 132)
    with pytest.raises(ValueError, match="d_v must be 512"):
        kernel.dims(dict(v32, d_v=256, d_qk=320))
    with pytest.raises(ValueError, match="power of two"):
        kernel.dims(dict(v32, d_qk=560))
    with pytest.raises(ValueError, match="impl must be one of"):
        kernel.launch({"impl": "nope"}, {})


SCRIPT = r"""
import json, sys
from kernels.runner import interpreter
interpreter.enable()
import torch
from kernels.runner.bench import compare
from kernels.runner.package import load_package
pkg = load_package("kernels/packages/sparse_mla_decode_fp8")
module, reference = pkg.load_module(pkg.entry), pkg.reference_fn()
out = []
for case in json.loads(sys.argv[1]):
    inputs = module.make_inputs(case["shape"], case["batch"], "cpu", seed=case["seed"], padding=case["padding"])
    for b, start in case.get("blank", []):
        inputs["indices"][b, start:] = -1
    if case.get("drop_scales"):            # a kernel that forgot the scales sees all-ones scales
        wrong = dict(inputs, kv=inputs["kv"].clone())
        wrong["kv"][:, 512:528] = torch.ones((1, 4)).view(torch.uint8)
        result = module.launch(case["params"], wrong)
    else:
        result = module.launch(case["params"], inputs)
    ok, max_abs, _, reason = compare(torch, result, reference(inputs), pkg.tolerance["atol"], pkg.tolerance["rtol"])
    out.append({"ok": ok, "max_abs": max_abs, "reason": reason,
                "zero_rows": [int(torch.count_nonzero(result[b])) == 0 for b in range(result.shape[0])]})
print(json.dumps(out))
"""

PARAMS = [
    {"impl": "baseline", "BLOCK_N": 16},
    {"impl": "head_tiled", "BLOCK_H": 16, "BLOCK_N": 16},
    {"impl": "head_tiled", "BLOCK_H": 32, "BLOCK_N": 32},
    {"impl": "split_k", "BLOCK_H": 16, "BLOCK_N": 16, "NUM_SPLITS": "auto"},
    {"impl": "split_k", "BLOCK_H": 16, "BLOCK_N": 16, "NUM_SPLITS": 2},
    # half the output columns per program, each computing the full q.k
    {"impl": "head_tiled", "BLOCK_H": 16, "BLOCK_N": 16, "BLOCK_DV": 256},
    {"impl": "split_k", "BLOCK_H": 16, "BLOCK_N": 16, "NUM_SPLITS": 2, "BLOCK_DV": 256},
]


def _run(cases: list[dict]) -> list[dict]:
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    return run_script(SCRIPT, cases, timeout=900)


@pytest.mark.slow
def test_every_implementation_matches_the_reference_and_empty_requests_give_zeros():
    cases = [{"shape": shape, "batch": 2, "seed": 7, "padding": 5, "params": params}
             for shape in (ROPE, NO_ROPE) for params in PARAMS]
    # request 0 selected nothing, request 1 only its first 16 tokens (splits 2 and 3 are empty)
    cases += [{"shape": NO_ROPE, "batch": 2, "seed": 1, "padding": 0, "blank": [[0, 0], [1, 16]],
               "params": {"impl": impl, "BLOCK_H": 16, "BLOCK_N": 16, "NUM_SPLITS": splits}}
              for impl, splits in (("split_k", 3), ("head_tiled", "auto"), ("baseline", "auto"))]
    # the scales matter: the same launch on rows whose scales read 1.0 is far off the reference
    cases += [{"shape": ROPE, "batch": 2, "seed": 7, "padding": 0, "drop_scales": True, "params": PARAMS[1]}]
    results = _run(cases)
    n = 2 * len(PARAMS)
    for case, result in zip(cases[:n], results[:n]):
        # the tiled kernels round the dequantized tile and P to bf16 (one ulp is 2^-8 relative)
        assert result["ok"], f"{case['shape']['name']} {case['params']}: {result['reason']}"
        assert result["max_abs"] <= 0.04
    for case, result in zip(cases[n:n + 3], results[n:n + 3]):
        assert result["ok"], f"{case['params']}: {result['reason']}"
        assert result["zero_rows"] == [True, False], case["params"]
    assert not results[n + 3]["ok"] and "wrong result" in results[n + 3]["reason"]


@pytest.mark.slow
def test_it_builds_for_hopper_without_a_gpu_with_tensor_cores_where_tiled(tmp_path):
    pytest.importorskip("triton")
    variants = [
        {"variant_id": 1, "params": {"impl": "baseline", "BLOCK_H": 16, "BLOCK_N": 16, "num_warps": 4,
                                     "num_stages": 1, "NUM_SPLITS": "auto"}},
        {"variant_id": 2, "params": {"impl": "split_k", "BLOCK_H": 64, "BLOCK_N": 16, "num_warps": 8,
                                     "num_stages": 2, "NUM_SPLITS": "auto"}},
    ]
    (tmp_path / "variants.json").write_text(json.dumps(variants))
    proc = run_runner("compile", "--package", FP8, "--variants", tmp_path / "variants.json", "--target", "cuda:90",
                      "--out", tmp_path / "builds.json")
    assert proc.returncode == 0, proc.stderr
    baseline, tiled = json.loads((tmp_path / "builds.json").read_text())
    assert baseline["ok"] and baseline["tensor_core"] is False
    assert tiled["ok"] and tiled["tensor_core_evidence"] == "wgmma"
    assert tiled["spills_bytes"] == 0 and 0 < tiled["registers"] <= 255
    # the q tile (64 x 576 bf16) and the pipelined fp8 tiles are in shared memory
    assert tiled["shared_bytes"] >= 64 * 576 * 2 + 2 * 16 * 512


def test_the_control_plane_reads_its_manifest():
    pytest.importorskip("django")
    from kernels.manifest import grid_expand, manifest_load

    m = manifest_load(FP8)
    assert m.language == "triton" and m.engine_env == "CEILING_SPARSE_MLA_FP8_CONFIG"
    assert m.dtype == "fp8_e4m3"                   # the exported configs are named for the FP8 cache
    assert [s.name for s in m.shapes] == ["v4-flash", "v32"]
    nbytes, flops = m.cost("v32", 1)
    # a V3.2 row is 656 bytes instead of 1152; q, out and the indices as in the bf16 package
    assert nbytes == 2048 * 656 + 128 * 576 * 2 + 128 * 512 * 2 + 2048 * 4
    assert flops == 2 * 128 * 2048 * (576 + 512)
    assert m.cost("v4-flash", 1)[0] == 640 * 528 + 64 * 512 * 2 * 2 + 640 * 4
    variants = grid_expand(m).variants
    assert all(v["BLOCK_H"] * v["BLOCK_DV"] <= 4096 * v["num_warps"] for v in variants if v["impl"] != "baseline")
    assert len(variants) == 404


GPU_PARAMS = [
    {"impl": "baseline", "BLOCK_N": 16, "num_warps": 4, "num_stages": 1},
    {"impl": "head_tiled", "BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2},
    {"impl": "head_tiled", "BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 3},
    {"impl": "head_tiled", "BLOCK_H": 128, "BLOCK_N": 16, "num_warps": 8, "num_stages": 2, "BLOCK_DV": 256},
    {"impl": "split_k", "BLOCK_H": 64, "BLOCK_N": 16, "num_warps": 8, "num_stages": 3, "NUM_SPLITS": "auto"},
    {"impl": "split_k", "BLOCK_H": 128, "BLOCK_N": 16, "num_warps": 8, "num_stages": 2, "NUM_SPLITS": 4,
     "BLOCK_DV": 256},
]


@pytest.mark.gpu
@pytest.mark.parametrize("params", GPU_PARAMS, ids=lambda p: "-".join(str(v) for v in p.values()))
def test_on_a_gpu_every_implementation_matches_the_reference_at_the_real_shapes(params):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from kernels.runner.bench import compare

    pkg, kernel, _ = _modules()
    reference = pkg.reference_fn()
    for shape in pkg.shapes:
        inputs = kernel.make_inputs(dict(shape, kv_len=4 * shape["topk"]), 3, "cuda", seed=11,
                                    padding=shape["topk"] // 5)
        ok, _, _, reason = compare(torch, kernel.launch(params, inputs), reference(inputs),
                                         pkg.tolerance["atol"], pkg.tolerance["rtol"])
        assert ok, f"{shape['name']}: {reason}"
