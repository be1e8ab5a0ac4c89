"""The flagship's stored H200 job (``kernels/packages/sparse_mla_decode/results/``: the runner's
``variants.json``, ``results.json`` and ``sm90a-builds.json``, unedited) ingested through
``manage.py kernel_job_ingest --new``: the job holds exactly the measured variants, every
measurement lands, and the best variant per bucket is the fastest correct one in the file."""
from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from kernels.models import KernelBenchmark, KernelBest, KernelBuild, KernelJob
from kernels.services import kernel_job_from_measurement, kernel_package_register
from kernels.tests.conftest import REAL_PACKAGES

RESULTS = REAL_PACKAGES / "sparse_mla_decode" / "results"


def _load(name: str):
    return json.loads((RESULTS / name).read_text())


@pytest.fixture
def package(db, settings, tmp_path):
    settings.CEILING_KERNEL_CONFIG_DIR = tmp_path / "configs"
    return kernel_package_register(path=REAL_PACKAGES / "sparse_mla_decode")


def test_it_ingests_the_stored_h200_job_from_the_command(package):
    out = StringIO()
    call_command("kernel_job_ingest", str(RESULTS / "h200-results.json"), new="sparse_mla_decode",
                 variants=str(RESULTS / "h200-variants.json"), builds=str(RESULTS / "sm90a-builds.json"), stdout=out)
    job = KernelJob.objects.get()
    variants, results = _load("h200-variants.json"), _load("h200-results.json")
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
    job = kernel_job_from_measurement(package=package, variants=_load("h200-variants.json"),
                                      results=_load("h200-results.json"))
    fastest: dict[tuple[str, int], float] = {}
    for r in _load("h200-results.json")["results"]:
        if r["correct"] and r.get("median_us") is not None:
            key = (r["shape"], r["batch"])
            fastest[key] = min(fastest.get(key, float("inf")), r["median_us"])
    best = {(b.shape, b.batch): b.median_us for b in KernelBest.objects.filter(job=job)}
    assert best.keys() == fastest.keys() and len(best) == 14
    for key, us in best.items():
        assert us == pytest.approx(fastest[key])


def test_it_refuses_a_variant_the_grid_does_not_hold_and_stores_nothing(package):
    from controlplane.errors import InvalidInput

    variants = _load("h200-variants.json")[:2]
    variants[1] = {"variant_id": variants[1]["variant_id"], "params": {**variants[1]["params"], "BLOCK_H": 48}}
    with pytest.raises(InvalidInput) as err:
        kernel_job_from_measurement(package=package, variants=variants, results=_load("h200-results.json"))
    assert "not in sparse_mla_decode's grid" in str(err.value.errors["variants"])
    assert not KernelJob.objects.exists()
