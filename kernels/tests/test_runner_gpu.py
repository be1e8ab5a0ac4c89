"""On a GPU: the three implementations against the reference at the real shapes, and a small
bench through the command line, as a GPU node runs it. Skipped where PyTorch or a CUDA GPU is
missing (CI)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

REPO = Path(__file__).resolve().parents[2]
FLAGSHIP = REPO / "kernels" / "packages" / "sparse_mla_decode"
RESULT_KEYS = {"variant_id", "shape", "batch", "correct", "max_abs_err", "max_rel_err", "error", "median_us",
               "p10_us", "p90_us", "min_us", "reps", "gbps", "tflops", "roofline_us", "roofline_fraction",
               "bound", "timing"}
BASELINE = {"impl": "baseline", "BLOCK_H": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1, "NUM_SPLITS": "auto"}
WIDE_SPLIT = {"impl": "split_k", "BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2, "NUM_SPLITS": "auto"}


@pytest.mark.parametrize("params", [
    BASELINE,
    {"impl": "head_tiled", "BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2},
    {"impl": "head_tiled", "BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 3},
    WIDE_SPLIT,
    {"impl": "split_k", "BLOCK_H": 32, "BLOCK_N": 16, "num_warps": 4, "num_stages": 3, "NUM_SPLITS": 8},
], ids=lambda p: "-".join(str(v) for v in p.values()))
def test_it_matches_the_reference_at_the_real_shapes(params):
    from kernels.runner.bench import compare
    from kernels.runner.package import load_package

    pkg = load_package(FLAGSHIP)
    module, reference = pkg.load_module(pkg.entry), pkg.reference_fn()
    for shape in pkg.shapes:
        small_cache = dict(shape, kv_len=4 * shape["topk"])
        inputs = module.make_inputs(small_cache, 3, "cuda", seed=11, padding=shape["topk"] // 5)
        out = module.launch(params, inputs)
        ok, max_abs, _, reason = compare(torch, out, reference(inputs), pkg.tolerance["atol"], pkg.tolerance["rtol"])
        assert ok, f"{shape['name']}: {reason}"


def test_it_benchmarks_a_small_grid_through_the_command_line(tmp_path):
    from kernels.runner.package import load_package

    pkg = load_package(FLAGSHIP)
    variants = [{"variant_id": "base", "params": BASELINE}, {"variant_id": "split", "params": WIDE_SPLIT}]
    (tmp_path / "variants.json").write_text(json.dumps(variants))
    proc = subprocess.run([sys.executable, "-m", "kernels.runner", "bench", "--package", str(FLAGSHIP),
                           "--variants", str(tmp_path / "variants.json"), "--out", str(tmp_path / "results.json"),
                           "--shapes", "v4-flash", "--batches", "1,32", "--jobs", "2"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    progress = [json.loads(line)["progress"] for line in proc.stdout.splitlines() if line.strip()]
    assert progress[0] == {"done": 0, "total": 4} and progress[-1] == {"done": 4, "total": 4}
    payload = json.loads((tmp_path / "results.json").read_text())
    device = payload["device"]
    assert device["cc"] == "{}.{}".format(*torch.cuda.get_device_capability(0))
    assert device["hbm_gbps"] > 100 and device["bf16_tflops"] > 10
    assert device["l2_bytes"] > 0 and device["sm_count"] > 0
    rows = {(r["variant_id"], r["batch"]): r for r in payload["results"]}
    assert len(rows) == 4
    for row in rows.values():
        assert set(row) == RESULT_KEYS
        assert row["correct"] and row["error"] is None, row
        assert row["min_us"] <= row["p10_us"] <= row["median_us"] <= row["p90_us"]
        assert 0 < row["roofline_fraction"] <= 1.2, row
        assert row["reps"] >= 20 and row["timing"].startswith("cuda_graph")
        nbytes, flops = pkg.cost_of(pkg.shape("v4-flash"), row["batch"])
        assert row["gbps"] == pytest.approx(nbytes / row["median_us"] / 1e3)
        assert row["tflops"] == pytest.approx(flops / row["median_us"] / 1e6)
        assert row["roofline_us"] == pytest.approx(max(nbytes / device["hbm_gbps"] / 1e3,
                                                       flops / device["bf16_tflops"] / 1e6))
    # the head-tiled split kernel reads each selected row once for all 64 heads, the baseline once per head
    assert rows[("split", 1)]["median_us"] * 2 < rows[("base", 1)]["median_us"]
    assert rows[("split", 32)]["median_us"] * 2 < rows[("base", 32)]["median_us"]
