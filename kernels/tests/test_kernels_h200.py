"""Measurements made on an NVIDIA H200 by the runner's ``bench`` (``data/h200_sparse_mla_*.json``:
the exported ``variants.json`` of a sparse_mla_decode job and the ``results.json`` the runner wrote
there, unedited), ingested through the same path as any job: the device calibration, the best
variant per bucket against the baseline, and the exported configs."""
import json
from pathlib import Path

import pytest

from kernels.models import KernelBest
from kernels.services import kernel_job_create, kernel_job_ingest, kernel_package_register
from kernels.tests.conftest import REAL_PACKAGES

DATA = Path(__file__).parent / "data"
# The grid subset of the measured job (its 23 variants that built without spilling for sm_90).
SUBSET = {"BLOCK_H": [16, 32, 64], "BLOCK_N": [32], "num_stages": [1, 2], "NUM_SPLITS": ["auto", 4],
          "BLOCK_DV": [512]}  # that job predates BLOCK_DV: its variants hold all d_v columns


@pytest.fixture
def ingested(real_packages, db):
    from kernels.manifest import variant_key

    pkg = kernel_package_register(path=real_packages / "sparse_mla_decode")
    job = kernel_job_create(package=pkg, node=None, cc="9.0", params_subset=SUBSET, dispatch=False)
    by_key = {v.key: v.pk for v in job.variants.all()}
    measured = {v["variant_id"]: by_key[variant_key({**v["params"], "BLOCK_DV": 512})]
                for v in json.loads((DATA / "h200_sparse_mla_variants.json").read_text())}
    results = json.loads((DATA / "h200_sparse_mla_results.json").read_text())
    raw = json.loads(json.dumps(results))
    for r in results["results"]:
        r["variant_id"] = measured[r["variant_id"]]  # the ids of this database's rows
    # That run kept no builds file; what it says of its variants (built for sm_90, no spills) as
    # build facts, without which no measured variant may be a best.
    builds = [{"variant_id": pk, "ok": True, "spills_bytes": 0, "compiler": f"triton {raw['device']['triton']}"}
              for pk in sorted(set(measured.values()))]
    out = kernel_job_ingest(job=job, results=results, builds=builds)
    job.refresh_from_db()
    return job, out, raw


def test_it_stores_the_h200_calibration_and_every_measurement(ingested):
    job, out, raw = ingested
    assert out["status"] == "done" and out["results"]["stored"] == len(raw["results"]) == 322
    assert (job.device_name, job.device_cc, job.sm_count) == ("NVIDIA H200", "9.0", 132)
    assert job.hbm_gbps == pytest.approx(raw["device"]["hbm_gbps"]) and 4000 < job.hbm_gbps < 4800
    assert job.bf16_tflops == pytest.approx(raw["device"]["bf16_tflops"]) and 700 < job.bf16_tflops < 1000
    assert job.benchmarks_correct == 322 and job.benchmarks_wrong == 0
    from kernels.models import KernelBenchmark

    methods = {b.timing.split(" ")[0] for b in KernelBenchmark.objects.filter(variant__job=job)}
    assert methods == {"cuda_graph"}  # every point timed from CUDA graph replays of rotated inputs


def test_the_best_variant_per_bucket_is_the_fastest_correct_one_measured(ingested):
    job, _, raw = ingested
    fastest: dict[tuple[str, int], float] = {}
    for r in raw["results"]:
        key = (r["shape"], r["batch"])
        if r["correct"] and (key not in fastest or r["median_us"] < fastest[key]):
            fastest[key] = r["median_us"]
    best = {(b.shape, b.batch): b for b in KernelBest.objects.filter(job=job)}
    assert set(best) == set(fastest) and len(best) == 14
    for key, b in best.items():
        assert b.median_us == pytest.approx(fastest[key])
        assert b.variant.params["impl"] != "baseline"
    # the first target on the H200: the best variant >= 3x the baseline at batch <= 8
    for shape in ("v4-flash", "v32"):
        for batch in (1, 2, 4, 8):
            assert best[(shape, batch)].speedup >= 3.0, (shape, batch, best[(shape, batch)].speedup)


def test_it_exports_one_config_per_shape_keyed_by_batch(ingested, settings):
    job, _, _ = ingested
    names = sorted(Path(p).name for p in job.config_paths)
    assert names == ["device_name=NVIDIA_H200,shape=v32,dtype=bf16.json",
                     "device_name=NVIDIA_H200,shape=v4-flash,dtype=bf16.json"]
    config = json.loads(next(Path(p) for p in job.config_paths if "shape=v4-flash" in p).read_text())
    assert list(config) == ["1", "2", "4", "8", "16", "32", "64"]
    best1 = KernelBest.objects.get(job=job, shape="v4-flash", batch=1)
    assert config["1"] == best1.variant.params
