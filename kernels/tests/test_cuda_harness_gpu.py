"""The CUDA package's harness (``kernels/packages/sparse_mla_decode_cuda/harness.py``).

On a GPU: a head-tiled and a split-K variant built with nvcc for the GPU's compute capability
(``kernels.runner.build.nvcc_argv``, as the runner builds them) and launched through the harness
(CUDA driver API via ctypes) on small inputs of both shapes, with ``-1`` padding, against the
package reference within the manifest tolerance. Skipped where PyTorch sees no CUDA GPU, the GPU
cannot run sm_90a code, or nvcc is missing.

Without a GPU: the launch plan (``split_plan``), the shared-memory budget (``tiled_smem_bytes``)
against the manifest's constraint, the harness's refusals that come before any driver call, and
its inputs being the Triton package's value for value."""
from __future__ import annotations

import math
import subprocess
import types
from pathlib import Path

import pytest

from kernels.runner.package import load_package

# Only the runner (no Django) at import time: the GPU tests run in an engine's Python too.
CUDA_PACKAGE = Path(__file__).resolve().parents[1] / "packages" / "sparse_mla_decode_cuda"
HEAD_TILED = {"impl": "head_tiled", "BLOCK_N": 64, "num_warps": 8, "VEC": 8, "STAGES": 2, "NUM_SPLITS": "auto"}
SPLIT_K = {"impl": "split_k", "BLOCK_N": 32, "num_warps": 8, "VEC": 8, "STAGES": 3, "NUM_SPLITS": "auto"}
SEESAW = {"impl": "split_k", "BLOCK_N": 64, "num_warps": 12, "VEC": 8, "STAGES": 2, "NUM_SPLITS": "auto"}


@pytest.fixture(scope="module")
def pkg():
    return load_package(CUDA_PACKAGE)


@pytest.fixture(scope="module")
def harness(pkg):
    return pkg.load_module(pkg.cuda["harness"])


# --------------------------------------------------------------------------------------------
# CPU: launch plan and shared memory
# --------------------------------------------------------------------------------------------
def test_split_plan_fills_one_wave_for_split_k_auto(pkg, harness):
    flash, v32 = pkg.shape("v4-flash"), pkg.shape("v32")
    # v4-flash at batch 64: 64 blocks of 64 heads, so 132 SMs take 2 splits of 10 / 2 tiles each
    for block_n in (32, 64):
        assert harness.split_plan({**SPLIT_K, "BLOCK_N": block_n}, flash, 64, 132) == (2, 320)
    # batch 1: 132 blocks would want 132 splits, capped at one BLOCK_N tile per split
    assert harness.split_plan({**SPLIT_K, "BLOCK_N": 64}, flash, 1, 132) == (10, 64)
    # v32 has two head tiles: batch 32 is 64 blocks, 2 splits of 1024 tokens; batch 64 fills a wave alone
    assert harness.split_plan(SPLIT_K, v32, 32, 132) == (2, 1024)
    assert harness.split_plan(SPLIT_K, v32, 64, 132) == (1, 2048)


def test_split_plan_honours_explicit_splits_and_never_leaves_a_split_empty(pkg, harness):
    flash = pkg.shape("v4-flash")
    assert harness.split_plan({**SPLIT_K, "BLOCK_N": 64, "NUM_SPLITS": 4}, flash, 64, 132) == (4, 192)
    # 640 tokens in 64-token tiles: 8 requested splits of 2 tiles each leave only 5 non-empty ones
    assert harness.split_plan({**SPLIT_K, "BLOCK_N": 64, "NUM_SPLITS": 8}, flash, 1, 132) == (5, 128)
    with pytest.raises(ValueError, match="NUM_SPLITS"):
        harness.split_plan({**SPLIT_K, "NUM_SPLITS": 0}, flash, 1, 132)
    for shape in pkg.shapes:
        for batch in shape["batches"]:
            for params in ({**SPLIT_K, "NUM_SPLITS": n} for n in ("auto", 2, 4, 8)):
                splits, per_split = harness.split_plan(params, shape, batch, 132)
                assert splits >= 1 and per_split % params["BLOCK_N"] == 0
                # every split has a token, and together they cover topk
                assert (splits - 1) * per_split < shape["topk"] <= splits * per_split


def test_split_plan_is_one_split_for_head_tiled(pkg, harness):
    for shape in pkg.shapes:
        for batch in (1, 64):
            splits, per_split = harness.split_plan(HEAD_TILED, shape, batch, 132)
            assert splits == 1 and per_split >= shape["topk"]
            assert per_split == math.ceil(shape["topk"] / HEAD_TILED["BLOCK_N"]) * HEAD_TILED["BLOCK_N"]


def test_tiled_smem_bytes_fits_sm_90_for_every_tiled_variant_of_the_grid(harness):
    assert harness.MAX_SHARED_BYTES == 232448
    assert harness.tiled_smem_bytes(576, 64, 2) <= harness.MAX_SHARED_BYTES
    assert harness.tiled_smem_bytes(576, 32, 4) <= harness.MAX_SHARED_BYTES
    assert harness.tiled_smem_bytes(576, 64, 3) > harness.MAX_SHARED_BYTES
    # the q tile plus the ring dominate: 64 heads x d_qk and STAGES x BLOCK_N rows, bf16
    assert harness.tiled_smem_bytes(512, 32, 2) > (64 + 2 * 32) * 512 * 2
    assert harness.tiled_smem_bytes(576, 32, 2) > harness.tiled_smem_bytes(512, 32, 2)
    # the manifest's shared-memory constraint admits exactly the tiled variants the harness can launch
    pytest.importorskip("pydantic")  # the control plane's manifest validation
    from kernels.manifest import grid_expand, manifest_load

    manifest = manifest_load(CUDA_PACKAGE)
    tiled = [v for v in grid_expand(manifest).variants if v["impl"] != "baseline"]
    assert tiled
    for v in tiled:
        assert harness.tiled_smem_bytes(576, v["BLOCK_N"], v["STAGES"]) <= harness.MAX_SHARED_BYTES, v
    pruned = [(bn, st) for bn in manifest.grid["BLOCK_N"] if bn in (32, 64) for st in manifest.grid["STAGES"]
              if st >= 2 and not any(v["BLOCK_N"] == bn and v["STAGES"] == st for v in tiled)]
    assert pruned and all(harness.tiled_smem_bytes(576, bn, st) > harness.MAX_SHARED_BYTES for bn, st in pruned)


def test_launch_refuses_tensors_the_kernels_cannot_read_before_any_driver_call(pkg, harness, monkeypatch):
    """dtype, layout, device and shape checks raise ValueError before anything touches CUDA."""
    torch = pytest.importorskip("torch")

    def loaded(*args, **kwargs):
        raise AssertionError("the harness reached the driver for a launch it should have refused")

    monkeypatch.setattr(harness, "_function", loaded)
    small = dict(pkg.shape("v4-flash"), kv_len=1024)
    inputs = harness.make_inputs(small, 2, "cpu", 0)
    with pytest.raises(ValueError, match="one CUDA device"):
        harness.launch(dict(HEAD_TILED, cubin="k.cubin"), inputs)
    for field, bad, message in (("indices", inputs["indices"].long(), "torch.int32"),
                                ("q", inputs["q"].float(), "torch.bfloat16"),
                                ("kv", inputs["kv"].t(), "contiguous"),
                                ("out", inputs["out"][:, :, :256].contiguous(), r"must be \[batch, heads, d_v\]"),
                                ("kv", inputs["kv"][:, :256].contiguous(), "shapes do not fit")):
        with pytest.raises(ValueError, match=message):
            harness._check_inputs(torch, *[bad if f == field else inputs[f] for f in ("q", "kv", "indices", "out")],
                                  inputs["d_v"])


def test_launch_refuses_what_the_tiled_kernels_cannot_take_before_any_driver_call(pkg, harness, monkeypatch):
    """Shape and parameter checks of the launch itself raise ValueError before the module is
    loaded; the CUDA stream query is replaced, so this needs no GPU."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: types.SimpleNamespace(cuda_stream=0))

    def loaded(*args, **kwargs):
        raise AssertionError("the harness reached the driver for a launch it should have refused")

    monkeypatch.setattr(harness, "_function", loaded)
    monkeypatch.setattr(harness, "_sm_count", loaded)
    small = dict(pkg.shape("v4-flash"), kv_len=1024)
    inputs = harness.make_inputs(small, 1, "cpu", 0)
    with pytest.raises(ValueError, match="cubin"):
        harness._launch_variant(torch, HEAD_TILED, inputs)
    with pytest.raises(ValueError, match="heads % 64 == 0"):
        harness._launch_variant(torch, dict(HEAD_TILED, cubin="k.cubin"),
                                harness.make_inputs(dict(small, heads=32), 1, "cpu", 0))
    with pytest.raises(ValueError, match="impl must be"):
        harness._launch_variant(torch, dict(HEAD_TILED, impl="wide", cubin="k.cubin"), inputs)
    wide = harness.make_inputs(dict(pkg.shape("v32"), kv_len=2048), 1, "cpu", 0)
    with pytest.raises(ValueError, match="shared memory"):
        harness._launch_variant(torch, dict(SPLIT_K, BLOCK_N=64, STAGES=3, cubin="k.cubin"), wide)
    with pytest.raises(ValueError, match="d_qk <= 1024"):
        harness._launch_variant(torch, {"impl": "baseline", "num_warps": 4, "cubin": "k.cubin"},
                                harness.make_inputs(dict(small, d_qk=1088, d_v=512), 1, "cpu", 0))


def test_the_seesaw_schedule_splits_whole_tile_pairs_and_fits_sm_90(pkg, harness):
    """num_warps 12 takes its tokens two 64-row tiles at a time, so a split is a multiple of 128
    tokens; its shared memory (q, two buffers, P tiles, barriers) fits the 227 KiB and is what the
    manifest's build facts add for it."""
    assert harness.is_seesaw(SEESAW) and not harness.is_seesaw(SPLIT_K)
    assert not harness.is_seesaw({"impl": "baseline", "num_warps": 12})
    for shape in pkg.shapes:
        for batch in shape["batches"]:
            for params in ({**SEESAW, "NUM_SPLITS": n} for n in ("auto", 2, 4, 8)):
                splits, per_split = harness.split_plan(params, shape, batch, 132)
                assert per_split % 128 == 0 and (splits - 1) * per_split < shape["topk"] <= splits * per_split
    # V4-Flash batch 32 with 4 splits: 640 tokens are 5 pairs, so 2 pairs (256 tokens) a split, 3 splits
    assert harness.split_plan({**SEESAW, "NUM_SPLITS": 4}, pkg.shape("v4-flash"), 32, 132) == (3, 256)
    assert harness.split_plan(dict(SEESAW, impl="head_tiled"), pkg.shape("v32"), 64, 132) == (1, 2048)
    assert harness.seesaw_smem_bytes(576) <= harness.MAX_SHARED_BYTES
    assert harness.seesaw_smem_bytes(512) < harness.seesaw_smem_bytes(576)
    assert 3 * 64 * 576 * 2 < harness.seesaw_smem_bytes(576)
    from kernels.safeexpr import expr_evaluate

    assert expr_evaluate(pkg.cuda["dynamic_shared"], dict(SEESAW)) == harness.seesaw_smem_bytes(576)
    pytest.importorskip("pydantic")  # the control plane's manifest validation
    from kernels.manifest import grid_expand, manifest_load

    seesaw = [v for v in grid_expand(manifest_load(CUDA_PACKAGE)).variants if v["num_warps"] == 12]
    assert {v["impl"] for v in seesaw} == {"head_tiled", "split_k"}
    assert all(v["BLOCK_N"] == 64 and v["STAGES"] == 2 for v in seesaw)


def test_split_plan_of_an_empty_selection_is_one_empty_split(harness):
    assert harness.split_plan({"impl": "split_k", "BLOCK_N": 64}, {"topk": 0, "heads": 64}, 4, 132) == (1, 0)


def test_its_inputs_are_the_triton_packages_value_for_value(pkg, harness):
    """Both packages are benchmarked on the same tensors (same generator and draw order), so their
    stored rows compare one to one; the CUDA package keeps its own copy (an exported job carries
    only its own sources)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    flagship = load_package(CUDA_PACKAGE.parent / "sparse_mla_decode").load_module("kernel.py")
    for name in ("v4-flash", "v32"):
        shape = dict(pkg.shape(name), kv_len=pkg.shape(name)["topk"] * 2)
        ours = harness.make_rotation(shape, 3, "cpu", 5, 2, padding=7)
        theirs = flagship.make_rotation(shape, 3, "cpu", 5, 2, padding=7)
        for a, b in zip(ours, theirs):
            assert all(torch.equal(a[k], b[k]) for k in ("q", "kv", "indices"))
            assert a["sm_scale"] == b["sm_scale"] and a["d_v"] == b["d_v"]


# --------------------------------------------------------------------------------------------
# GPU: build with nvcc, launch through the harness, compare with the reference
# --------------------------------------------------------------------------------------------
def _gpu_cc():
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_capability(0)


TILED_PAIRS = [(32, 2), (32, 3), (32, 4), (64, 2)]   # every (BLOCK_N, STAGES) the grid allows


def _key(params):
    return (params["impl"], params["BLOCK_N"], params["STAGES"], params["num_warps"])


@pytest.fixture(scope="module")
def built(pkg, tmp_path_factory):
    """``{(impl, BLOCK_N, STAGES): cubin path}`` for both tiled impls at every pair, built for the
    GPU's cc."""
    from kernels.runner.build import find_tool, nvcc_argv

    cc = _gpu_cc()
    if cc is None:
        pytest.skip("no CUDA GPU visible to PyTorch")
    if cc != (9, 0):
        pytest.skip(f"the tiled kernels are sm_90a code (wgmma); this GPU is compute capability {cc[0]}.{cc[1]}")
    nvcc = find_tool("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed (CUDA toolkit)")
    out_dir = tmp_path_factory.mktemp("cuda-harness")
    cubins = {}
    for impl in ("head_tiled", "split_k"):
        for params in [dict(HEAD_TILED, impl=impl, BLOCK_N=bn, STAGES=st) for bn, st in TILED_PAIRS] + \
                      [dict(SEESAW, impl=impl)]:
            cubin = out_dir / f"{impl}-{params['BLOCK_N']}-{params['STAGES']}-{params['num_warps']}.cubin"
            argv = nvcc_argv(pkg, params, cc[0] * 10 + cc[1], nvcc, cubin)
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=pkg.root)
            assert proc.returncode == 0, proc.stderr[-3000:]
            cubins[_key(params)] = str(cubin)
    return cubins


@pytest.mark.gpu
@pytest.mark.parametrize("pair", TILED_PAIRS, ids=lambda p: f"BLOCK_N{p[0]}-STAGES{p[1]}")
@pytest.mark.parametrize("topk, splits", [(100, "auto"), (1000, 3), (1000, "auto")])
@pytest.mark.parametrize("shape_name", ["v4-flash", "v32"])
def test_ragged_selections_match_the_reference_at_every_tile_and_ring_size(pkg, harness, built, pair, topk, splits,
                                                                             shape_name):
    """topk not a multiple of the tile (the last tile of a split is partly past its end), with
    padding, for both implementations at every (BLOCK_N, STAGES) the grid allows."""
    import torch

    from kernels.runner.bench import compare

    reference = pkg.reference_fn()
    shape = dict(pkg.shape(shape_name), topk=topk, kv_len=2048)
    inputs = harness.make_inputs(shape, 3, "cuda", 13, padding=topk // 7)
    expected = reference(inputs)
    for impl in ("head_tiled", "split_k"):
        params = dict(HEAD_TILED, impl=impl, BLOCK_N=pair[0], STAGES=pair[1], NUM_SPLITS=splits if impl == "split_k" else "auto")
        out = harness.launch(dict(params, cubin=built[_key(params)]), inputs)
        torch.cuda.synchronize()
        ok, _, _, reason = compare(torch, out, expected, pkg.tolerance["atol"], pkg.tolerance["rtol"])
        assert ok, f"{impl} {pair} topk {topk} splits {splits} on {shape_name}: {reason}"


@pytest.mark.gpu
@pytest.mark.parametrize("topk, splits", [(100, "auto"), (1000, 3), (1000, "auto"), (2048, 2), (640, 8)])
@pytest.mark.parametrize("shape_name", ["v4-flash", "v32"])
def test_the_seesaw_schedule_matches_the_reference_on_ragged_selections(pkg, harness, built, topk, splits, shape_name):
    """The 12-warp seesaw schedule: an odd number of tiles in a split (its second tile all past the
    end), partial tiles and -1 padding, one split and several, both head dims."""
    import torch

    from kernels.runner.bench import compare

    reference = pkg.reference_fn()
    shape = dict(pkg.shape(shape_name), topk=topk, kv_len=4096)
    inputs = harness.make_inputs(shape, 3, "cuda", 21, padding=topk // 5)
    expected = reference(inputs)
    for impl in ("head_tiled", "split_k"):
        params = dict(SEESAW, impl=impl, NUM_SPLITS=splits if impl == "split_k" else "auto")
        out = harness.launch(dict(params, cubin=built[_key(params)]), inputs)
        torch.cuda.synchronize()
        ok, _, _, reason = compare(torch, out, expected, pkg.tolerance["atol"], pkg.tolerance["rtol"])
        assert ok, f"seesaw {impl} topk {topk} splits {splits} on {shape_name}: {reason}"


@pytest.mark.gpu
@pytest.mark.parametrize("params", [HEAD_TILED, dict(HEAD_TILED, impl="split_k", NUM_SPLITS=3),
                                    dict(SEESAW, impl="head_tiled"), dict(SEESAW, NUM_SPLITS=2)],
                         ids=["head_tiled", "split_k-3", "seesaw-head_tiled", "seesaw-split_k-2"])
@pytest.mark.parametrize("shape_name", ["v4-flash", "v32"])
def test_scores_that_climb_tile_after_tile_move_the_running_maximum_and_still_match(pkg, harness, built, params,
                                                                                     shape_name):
    """Rows scaled up along the selection (x1 at the first position to x8 at the last) make the
    scores climb, so a row's running maximum moves again and again after the first tile and the
    accumulator is rescaled mid-walk, by far more than a benchmark input's, in one split and across
    splits; the output still matches the reference. (A lazy rescaling rule that left the maximum
    stale failed this; see the package README.)"""
    import math

    import torch

    from kernels.runner.bench import compare

    reference = pkg.reference_fn()
    topk = 1000
    shape = dict(pkg.shape(shape_name), topk=topk, kv_len=2048)
    inputs = harness.make_inputs(shape, 2, "cuda", 5, padding=40)
    kv, idx = inputs["kv"], inputs["indices"]
    ramp = 1.0 + 7.0 * torch.arange(topk, device="cuda", dtype=torch.float32) / topk
    for b in range(idx.shape[0]):
        valid = idx[b] >= 0   # each request reads its own window: no row is scaled twice
        rows = idx[b][valid].long()
        kv[rows] = (kv[rows].float() * ramp[valid][:, None]).to(torch.bfloat16)
    # the premise: along request 0's selection, head 0's running maximum grows by more than 8
    # (base 2, a factor of 256) from the first tile to the last, in several steps
    rows = idx[0][idx[0] >= 0].long()
    scores = (kv[rows].float() @ inputs["q"][0, 0].float()) * inputs["sm_scale"] * math.log2(math.e)
    tile_max = torch.stack([t.max() for t in scores.split(64)])
    running = torch.cummax(tile_max, dim=0).values
    assert float(running[-1] - running[0]) > 8.0 and int((running[1:] > running[:-1]).sum()) >= 3, running
    out = harness.launch(dict(params, cubin=built[_key(params)]), inputs)
    torch.cuda.synchronize()
    ok, _, _, reason = compare(torch, out, reference(inputs), pkg.tolerance["atol"], pkg.tolerance["rtol"])
    assert ok, f"{params} on {shape_name}: {reason}"


@pytest.mark.gpu
@pytest.mark.parametrize("params", [HEAD_TILED, SPLIT_K, dict(SPLIT_K, NUM_SPLITS=4), SEESAW],
                         ids=["head_tiled", "split_k-auto", "split_k-4", "seesaw-split_k-auto"])
@pytest.mark.parametrize("shape_name", ["v4-flash", "v32"])
def test_the_tiled_kernels_match_the_reference_through_the_harness(pkg, harness, built, params, shape_name):
    import torch

    from kernels.runner.bench import compare

    reference = pkg.reference_fn()
    shape = dict(pkg.shape(shape_name), kv_len=4096)
    inputs = harness.make_inputs(shape, 3, "cuda", 7, padding=100)
    assert bool((inputs["indices"] == -1).any())
    out = harness.launch(dict(params, cubin=built[_key(params)]), inputs)
    torch.cuda.synchronize()
    assert out is inputs["out"] and tuple(out.shape) == (3, shape["heads"], shape["d_v"])
    ok, max_abs, _, reason = compare(torch, out, reference(inputs), pkg.tolerance["atol"], pkg.tolerance["rtol"])
    assert ok, f"{params} on {shape_name}: {reason}"


@pytest.mark.gpu
def test_a_request_with_only_padding_gives_zeros(pkg, harness, built):
    import torch

    shape = dict(pkg.shape("v4-flash"), kv_len=4096)
    inputs = harness.make_inputs(shape, 2, "cuda", 3, padding=shape["topk"])
    assert bool((inputs["indices"] == -1).all())
    for params in (HEAD_TILED, SPLIT_K):
        inputs["out"].fill_(1.0)
        out = harness.launch(dict(params, cubin=built[_key(params)]), inputs)
        torch.cuda.synchronize()
        assert bool((out == 0).all()), params["impl"]


@pytest.mark.gpu
def test_the_harness_refuses_heads_not_a_multiple_of_64_on_the_gpu(pkg, harness, built):
    inputs = harness.make_inputs(dict(pkg.shape("v4-flash"), heads=32, kv_len=1024), 1, "cuda", 0)
    with pytest.raises(ValueError, match="heads % 64 == 0"):
        harness.launch(dict(HEAD_TILED, cubin=built[_key(HEAD_TILED)]), inputs)


@pytest.mark.gpu
@pytest.mark.parametrize("params", [HEAD_TILED, dict(SPLIT_K, NUM_SPLITS=4)], ids=["head_tiled", "split_k-4"])
def test_back_to_back_dependent_launches_stay_ordered_eagerly_and_in_a_cuda_graph(pkg, harness, built, params,
                                                                                 monkeypatch):
    """Programmatic dependent launch (``harness.PDL``) lets a launch be scheduled while the one
    before it finishes. Six launches of one size share one split-K workspace (partials and
    log-sum-exps): if a tiled kernel wrote its partials before the previous combine had read them,
    or a combine read partials before they were written, outputs would mix requests. Each output
    must equal the plain-launch output bit for bit, eagerly and replayed from a CUDA graph."""
    import torch

    from kernels.runner.bench import compare

    shape = dict(pkg.shape("v32"), kv_len=8192)
    sets = harness.make_rotation(shape, 4, "cuda", 21, 6, padding=50)
    run = dict(params, cubin=built[_key(params)])
    monkeypatch.setattr(harness, "PDL", False)
    plain = [harness.launch(run, inputs).clone() for inputs in sets]
    monkeypatch.setattr(harness, "PDL", True)
    for inputs in sets:
        inputs["out"].zero_()
    for inputs in sets:
        harness.launch(run, inputs)
    torch.cuda.synchronize()
    assert all(torch.equal(inputs["out"], want) for inputs, want in zip(sets, plain))
    for inputs in sets:
        inputs["out"].zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for inputs in sets:
            harness.launch(run, inputs)
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(inputs["out"], want) for inputs, want in zip(sets, plain))
    ok, _, _, reason = compare(torch, sets[-1]["out"], pkg.reference_fn()(sets[-1]), pkg.tolerance["atol"],
                               pkg.tolerance["rtol"])
    assert ok, reason
