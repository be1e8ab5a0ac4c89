"""The H200 results stored beside the flagship package are the runner's own output: complete for
the stored variants, consistent with the manifest's cost formulas and the ceilings the job
measured, and they show what the kernels achieve against the baseline."""
import json
from pathlib import Path

import pytest

from kernels.runner.bench import roofline
from kernels.runner.package import load_package, load_variants

FLAGSHIP = Path(__file__).resolve().parents[1] / "packages" / "sparse_mla_decode"
RESULTS = FLAGSHIP / "results" / "h200-results.json"
VARIANTS = FLAGSHIP / "results" / "h200-variants.json"


@pytest.fixture(scope="module")
def stored():
    return load_package(FLAGSHIP), load_variants(VARIANTS), json.loads(RESULTS.read_text())


def test_it_has_one_correct_timed_row_per_variant_shape_and_batch(stored):
    pkg, variants, payload = stored
    expected = {(v["variant_id"], s["name"], b) for v in variants for s in pkg.shapes for b in s["batches"]}
    rows = {(r["variant_id"], r["shape"], r["batch"]): r for r in payload["results"]}
    assert set(rows) == expected and len(payload["results"]) == len(expected)
    for row in rows.values():
        assert row["correct"] and row["error"] is None
        # the element-wise check passed, so the largest error is within tolerance of max |ref|
        max_ref = row["max_abs_err"] / row["max_rel_err"]
        assert row["max_abs_err"] <= pkg.tolerance["atol"] + pkg.tolerance["rtol"] * max_ref
        assert row["min_us"] <= row["p10_us"] <= row["median_us"] <= row["p90_us"]
        assert row["timing"].startswith("cuda_graph")


def test_it_derives_every_rate_from_the_cost_formulas_and_the_measured_ceilings(stored):
    pkg, _, payload = stored
    device = payload["device"]
    assert device["name"] == "NVIDIA H200" and device["cc"] == "9.0"
    assert 3000 < device["hbm_gbps"] < 4800          # below the 4.8 TB/s datasheet figure
    assert 500 < device["bf16_tflops"] < 990         # below the 989 TFLOP/s dense datasheet figure
    for row in payload["results"]:
        nbytes, flops = pkg.cost_of(pkg.shape(row["shape"]), row["batch"])
        roof_us, bound = roofline(nbytes, flops, device["hbm_gbps"], device["bf16_tflops"])
        assert row["roofline_us"] == pytest.approx(roof_us) and row["bound"] == bound
        assert row["gbps"] == pytest.approx(nbytes / row["median_us"] / 1e3)
        assert row["tflops"] == pytest.approx(flops / row["median_us"] / 1e6)
        assert row["roofline_fraction"] == pytest.approx(roof_us / row["median_us"])
        assert row["roofline_fraction"] < 1.0


def test_it_shows_the_best_variant_at_least_three_times_faster_than_the_baseline_at_small_batch(stored):
    _, variants, payload = stored
    impl = {v["variant_id"]: v["params"]["impl"] for v in variants}
    by_point: dict = {}
    for row in payload["results"]:
        by_point.setdefault((row["shape"], row["batch"]), []).append(row)
    for (shape, batch), rows in by_point.items():
        baseline = min(r["median_us"] for r in rows if impl[r["variant_id"]] == "baseline")
        best = min(r["median_us"] for r in rows)
        if batch <= 8:
            assert baseline / best >= 3, (shape, batch, baseline, best)
