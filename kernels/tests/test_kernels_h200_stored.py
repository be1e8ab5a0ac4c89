"""The packages' stored H200 jobs (``kernels/packages/<package>/results/``: the runner's
``variants.json``, ``results.json`` and ``sm90a-builds.json``, unedited) ingested through
``manage.py kernel_job_ingest --new``: the job holds exactly the measured variants, every
measurement lands, and the best variant per bucket is the fastest correct one in the file.

Every package is covered: the Triton flagship ``sparse_mla_decode``, its FP8-cache sibling
``sparse_mla_decode_fp8`` and the CUDA C++ ``sparse_mla_decode_cuda``. Expectations are computed
from the files, so a newer run of the same variants replaces them without touching these tests."""
from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from kernels.models import KernelBenchmark, KernelBest, KernelBuild, KernelJob
from kernels.services import kernel_job_from_measurement, kernel_package_register
from kernels.tests.conftest import REAL_PACKAGES

PACKAGES = ["sparse_mla_decode", "sparse_mla_decode_cuda", "sparse_mla_decode_fp8"]
CUDA = "sparse_mla_decode_cuda"
TILED = ("head_tiled", "split_k")


def _results_dir(name: str) -> Path:
    return REAL_PACKAGES / name / "results"


def _load(name: str, file: str):
    return json.loads((_results_dir(name) / file).read_text())


@pytest.fixture(params=PACKAGES)
def package(request, db, settings, tmp_path):
    settings.CEILING_KERNEL_CONFIG_DIR = tmp_path / "configs"
    return kernel_package_register(path=REAL_PACKAGES / request.param)


def test_it_ingests_the_stored_h200_job_from_the_command(package):
    results_dir = _results_dir(package.name)
    out = StringIO()
    call_command("kernel_job_ingest", str(results_dir / "h200-results.json"), new=package.name,
                 variants=str(results_dir / "h200-variants.json"), builds=str(results_dir / "sm90a-builds.json"),
                 stdout=out)
    job = KernelJob.objects.get()
    variants, results = _load(package.name, "h200-variants.json"), _load(package.name, "h200-results.json")
    assert job.status == "done" and job.variants.count() == len(variants)
    assert job.device_name == "NVIDIA H200" and job.device_cc == "9.0"
    assert job.hbm_gbps == pytest.approx(results["device"]["hbm_gbps"])
    assert KernelBenchmark.objects.filter(variant__job=job).count() == len(results["results"])
    assert KernelBuild.objects.filter(variant__job=job).count() == len(variants)
    # the params the runner measured are the params stored against each measurement
    by_id = {v["variant_id"]: v["params"] for v in variants}
    sample = results["results"][0]
    stored = KernelBenchmark.objects.get(variant__job=job, shape=sample["shape"], batch=sample["batch"],
                                         variant__params=by_id[sample["variant_id"]])
    assert stored.median_us == pytest.approx(sample["median_us"])
    assert f"kernel job #{job.pk}: done" in out.getvalue()


def test_the_best_per_bucket_is_the_fastest_correct_measurement_in_the_file(package):
    variants = _load(package.name, "h200-variants.json")
    job = kernel_job_from_measurement(package=package, variants=variants,
                                      results=_load(package.name, "h200-results.json"),
                                      builds=_load(package.name, "sm90a-builds.json"))
    # a variant qualifies with a build that neither failed nor was discarded
    params_of = {str(v["variant_id"]): v["params"] for v in variants}
    usable = {json.dumps(b.variant.params, sort_keys=True)
              for b in KernelBuild.objects.filter(variant__job=job, ok=True, discarded=False)}
    fastest: dict[tuple[str, int], float] = {}
    for r in _load(package.name, "h200-results.json")["results"]:
        if json.dumps(params_of[str(r["variant_id"])], sort_keys=True) not in usable:
            continue
        if r["correct"] and r.get("median_us") is not None:
            key = (r["shape"], r["batch"])
            fastest[key] = min(fastest.get(key, float("inf")), r["median_us"])
    best = {(b.shape, b.batch): b.median_us for b in KernelBest.objects.filter(job=job)}
    assert best.keys() == fastest.keys() and len(best) == 14
    for key, us in best.items():
        assert us == pytest.approx(fastest[key])
    # the same measurements without their build facts pick no best at all
    KernelBest.objects.all().delete()
    KernelJob.objects.all().delete()
    job = kernel_job_from_measurement(package=package, variants=variants,
                                      results=_load(package.name, "h200-results.json"))
    assert job.benchmarks_correct > 0 and not KernelBest.objects.exists()


def test_it_refuses_a_variant_the_grid_does_not_hold_and_stores_nothing(package):
    from controlplane.errors import InvalidInput

    variants = _load(package.name, "h200-variants.json")[:2]
    # BLOCK_N 48 is in neither package's grid
    variants[1] = {"variant_id": variants[1]["variant_id"], "params": {**variants[1]["params"], "BLOCK_N": 48}}
    # without the stored fingerprint (which names the whole list) the grid check is what refuses
    results = {k: v for k, v in _load(package.name, "h200-results.json").items() if k != "variants_sha256"}
    with pytest.raises(InvalidInput) as err:
        kernel_job_from_measurement(package=package, variants=variants, results=results)
    assert f"not in {package.name}'s grid" in str(err.value.errors["variants"])
    assert not KernelJob.objects.exists()


def test_new_checks_the_results_fingerprint_against_the_variants_file_and_refuses_unknown_ids(package, tmp_path):
    from controlplane.errors import InvalidInput
    from kernels.runner.package import variants_sha256

    variants, results = _load(package.name, "h200-variants.json"), _load(package.name, "h200-results.json")
    # a stored run made since bench records the fingerprint names its variants file; an older one
    # has none and is paired by variant_id
    assert results.get("variants_sha256", variants_sha256(variants)) == variants_sha256(variants)
    results = {k: v for k, v in results.items() if k != "variants_sha256"}
    # a results file whose fingerprint is another variants list's: refused before any job exists
    wrong = {**results, "variants_sha256": variants_sha256(variants[1:])}
    with pytest.raises(InvalidInput) as err:
        kernel_job_from_measurement(package=package, variants=variants, results=wrong)
    message = err.value.errors["variants_sha256"][0]
    assert variants_sha256(variants[1:]) in message and variants_sha256(variants) in message
    # a row measured for a variant the file does not hold is refused, not paired with a row id
    stray = {**results, "results": [*results["results"], {**results["results"][0], "variant_id": 987654}]}
    with pytest.raises(InvalidInput) as err:
        kernel_job_from_measurement(package=package, variants=variants, results=stray)
    assert err.value.errors == {f"results.{len(results['results'])}.variant_id": [
        "variant_id 987654 is not in the variants file"]}
    assert not KernelJob.objects.exists()
    # the fingerprint bench writes for this very file goes through the command
    path = tmp_path / "results.json"
    path.write_text(json.dumps({**results, "variants_sha256": variants_sha256(variants)}))
    call_command("kernel_job_ingest", str(path), new=package.name,
                 variants=str(_results_dir(package.name) / "h200-variants.json"), stdout=StringIO())
    job = KernelJob.objects.get()
    assert job.status == "done" and KernelBenchmark.objects.filter(variant__job=job).count() == len(results["results"])


# --- the CUDA package's stored run ------------------------------------------------------------


def _cuda_impls() -> dict:
    return {v["variant_id"]: v["params"]["impl"] for v in _load(CUDA, "h200-variants.json")}


def _load_manifest_shapes() -> list[dict]:
    from kernels.runner.package import load_package

    return load_package(REAL_PACKAGES / CUDA).shapes


def test_every_stored_row_of_the_cuda_package_is_correct():
    rows = _load(CUDA, "h200-results.json")["results"]
    impls = _cuda_impls()
    assert rows and {impls[r["variant_id"]] for r in rows} == {"baseline", "head_tiled", "split_k"}
    for r in rows:
        assert r["correct"] is True and r["error"] is None, r
        assert r["median_us"] is not None and r["median_us"] > 0, r


def test_the_cuda_tiled_kernels_beat_the_cuda_baseline_three_times_at_small_batch():
    """At every (shape, batch) with batch <= 8 the best head-tiled / split-K median is at least 3x
    below the best baseline median (the baseline re-reads every selected row once per head)."""
    impls = _cuda_impls()
    best: dict[tuple[str, int], dict[str, float]] = {}
    for r in _load(CUDA, "h200-results.json")["results"]:
        if r["batch"] > 8 or not r["correct"]:
            continue
        kind = "baseline" if impls[r["variant_id"]] == "baseline" else "tiled"
        point = best.setdefault((r["shape"], r["batch"]), {})
        point[kind] = min(point.get(kind, float("inf")), r["median_us"])
    shapes = {s["name"] for s in _load_manifest_shapes()}
    assert {shape for shape, _ in best} == shapes
    for (shape, batch), point in sorted(best.items()):
        assert set(point) == {"baseline", "tiled"}, (shape, batch)
        assert point["baseline"] >= 3 * point["tiled"], (shape, batch, point)


def test_the_stored_cuda_builds_show_the_tiled_variants_on_the_tensor_cores():
    """``sm90a-builds.json`` (``python -m kernels.runner compile --target cuda:90`` over the stored
    variants): every variant built; the tiled ones have wgmma in their SASS, a register budget of a
    thread holding half the 64 x 512 fp32 accumulator, and no spills; the baseline has no MMA."""
    impls = _cuda_impls()
    builds = _load(CUDA, "sm90a-builds.json")
    assert sorted(b["variant_id"] for b in builds) == sorted(impls)
    for b in builds:
        impl = impls[b["variant_id"]]
        assert b["ok"] is True and b["error"] is None and b["compiler"].startswith("nvcc "), b["variant_id"]
        assert b["spills_bytes"] == 0, (b["variant_id"], b["spills_bytes"])
        if impl in TILED:
            assert b["tensor_core"] is True and b["tensor_core_evidence"] == "wgmma", (b["variant_id"], impl)
            assert 128 <= b["registers"] <= 255, (b["variant_id"], b["registers"])
            assert f"-Dimpl={impl}" in b["log"] and "arch=compute_90a,code=sm_90a" in b["log"]
        else:
            assert b["tensor_core"] is False and b["tensor_core_evidence"] == "none", b["variant_id"]
            assert 0 < b["registers"] <= 255


def test_the_ingested_cuda_builds_keep_the_tensor_core_facts(db, settings, tmp_path):
    settings.CEILING_KERNEL_CONFIG_DIR = tmp_path / "configs"
    pkg = kernel_package_register(path=REAL_PACKAGES / CUDA)
    job = kernel_job_from_measurement(package=pkg, variants=_load(CUDA, "h200-variants.json"),
                                      results=_load(CUDA, "h200-results.json"),
                                      builds=_load(CUDA, "sm90a-builds.json"))
    stored = list(KernelBuild.objects.filter(variant__job=job).select_related("variant"))
    assert len(stored) == len(_cuda_impls())
    for b in stored:
        tiled = b.variant.params["impl"] in TILED
        assert b.ok and not b.discarded, (b.variant.params, b.discard_reason)
        assert b.tensor_core is tiled and b.tensor_core_evidence == ("wgmma" if tiled else "none")
