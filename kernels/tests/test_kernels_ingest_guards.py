"""Results and builds that do not belong to a job are refused, and one bucket's choice never
replaces another's file (the stored H200 runs of ``kernels/packages/*/results/`` as inputs):

* config files are kept per (compiler, compute capability): results of another Triton version
  write their own file, and ``best:<id>`` resolves to its own bucket's file;
* a builds file of a package in another language (nvcc builds into a Triton job) is refused;
* a 0 µs timing, a repeated (variant, shape, batch) row, an unknown compute capability, a cc other
  than the job's target and a device other than the one whose results the job holds are refused;
* a job created from a variants file with other ids (``--new``) renumbers later files carrying that
  file's fingerprint and refuses files without one (their ids could be either numbering)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from controlplane.errors import InvalidInput
from kernels.models import KernelBenchmark, KernelBest, KernelJob
from kernels.runner.package import variants_sha256
from kernels.services import kernel_job_from_measurement, kernel_job_ingest, kernel_package_register
from kernels.services.results import kernel_builds_store
from kernels.tests.conftest import REAL_PACKAGES

TRITON, CUDA = "sparse_mla_decode", "sparse_mla_decode_cuda"


def _load(name: str, file: str):
    return json.loads((REAL_PACKAGES / name / "results" / file).read_text())


@pytest.fixture
def triton(db, settings, tmp_path):
    settings.CEILING_KERNEL_CONFIG_DIR = tmp_path / "configs"
    return kernel_package_register(path=REAL_PACKAGES / TRITON)


def _new_job(package, results=None, builds=None):
    """A job from the package's stored run, with its build facts (a variant needs them to be a best)."""
    return kernel_job_from_measurement(package=package, variants=_load(package.name, "h200-variants.json"),
                                       results=results if results is not None else _load(package.name, "h200-results.json"),
                                       builds=builds if builds is not None else _load(package.name, "sm90a-builds.json"))


def test_another_compilers_results_write_their_own_config_file(triton):
    first = _new_job(triton)
    v4 = KernelBest.objects.get(job=first, shape="v4-flash", batch=1)
    before = Path(v4.config_path).read_text()
    assert "compiler=triton_3.6.0,cc=9.0" in v4.config_path
    slower = copy.deepcopy(_load(TRITON, "h200-results.json"))
    slower["device"]["triton"] = "3.5.0"
    variants = {v["variant_id"]: v["params"] for v in _load(TRITON, "h200-variants.json")}
    for r in slower["results"]:
        if variants[r["variant_id"]]["impl"] != "baseline" and r.get("median_us"):
            for key in ("median_us", "p10_us", "p90_us", "min_us"):
                r[key] = r[key] * 100 if r.get(key) else r.get(key)
            r.pop("roofline_fraction", None), r.pop("gbps", None), r.pop("tflops", None)
    older = [{**b, "compiler": "triton 3.5.0"} for b in _load(TRITON, "sm90a-builds.json")]
    second = _new_job(triton, results=slower, builds=older)
    other = KernelBest.objects.get(job=second, shape="v4-flash", batch=1)
    assert other.compiler == "triton 3.5.0" and "compiler=triton_3.5.0,cc=9.0" in other.config_path
    assert json.loads(Path(other.config_path).read_text())["1"]["impl"] == "baseline"
    v4.refresh_from_db()
    assert Path(v4.config_path).read_text() == before            # the 3.6.0 file is untouched
    assert json.loads(before)["1"]["impl"] != "baseline"


def test_builds_of_a_package_in_another_language_are_refused(triton):
    job = _new_job(triton)
    # an nvcc build fact numbered with this job's own ids: refused for what built it
    fact = {**_load(CUDA, "sm90a-builds.json")[0], "variant_id": job.variants.order_by("pk").first().pk}
    with pytest.raises(InvalidInput) as err:
        kernel_builds_store(job_id=job.pk, payload=[fact])
    assert "is built by triton" in err.value.errors["builds.0.compiler"][0]
    job.refresh_from_db()
    assert job.compiler == "triton 3.6.0"


def _marked(payload: dict) -> dict:
    """``payload`` carrying the fingerprint of the variants file the job was made from."""
    return {**payload, "variants_sha256": variants_sha256(_load(TRITON, "h200-variants.json"))}


def test_a_zero_timing_and_a_repeated_row_are_refused(triton):
    job = _new_job(triton)
    first = _load(TRITON, "h200-variants.json")[0]["variant_id"]
    row = {"variant_id": first, "shape": "v4-flash", "batch": 1, "correct": True, "median_us": 0.0}
    device = _load(TRITON, "h200-results.json")["device"]
    with pytest.raises(InvalidInput) as err:
        kernel_job_ingest(job=job, results=_marked({"device": device, "results": [row]}))
    assert "greater than 0" in err.value.errors["results.0.median_us"][0]
    twice = [{**row, "median_us": 50.0}, {**row, "median_us": 1.0}]
    with pytest.raises(InvalidInput) as err:
        kernel_job_ingest(job=job, results=_marked({"device": device, "results": twice}))
    assert "repeats results.0" in err.value.errors["results.1"][0]
    best = KernelBest.objects.get(job=job, shape="v4-flash", batch=1)
    assert best.median_us > 1.0


@pytest.mark.parametrize("change, key, words", [
    ({"cc": "7.7"}, "device.cc", "not a compute capability of an NVIDIA GPU"),
    ({"cc": "8.0", "name": "NVIDIA A100-SXM4-80GB"}, "device.cc", "built its variants for compute capability 9.0"),
    ({"cc": "8.0"}, "device.cc", "NVIDIA H200 is a compute capability 9.0 GPU (NVIDIA's CUDA GPUs list); the file "
                                 "says 8.0"),
    ({"name": "NVIDIA H100 80GB HBM3"}, "device.name", "holds results measured on NVIDIA H200"),
    ({"triton": "3.5.0"}, "device.triton", "compiled by triton 3.6.0"),
])
def test_results_of_another_device_target_or_compiler_are_refused(triton, change, key, words):
    job = _new_job(triton)
    bests = set(KernelBest.objects.values_list("pk", "median_us"))
    other = copy.deepcopy(_load(TRITON, "h200-results.json"))
    other["device"].update(change)
    with pytest.raises(InvalidInput) as err:
        kernel_job_ingest(job=job, results=_marked(other))
    assert words in " ".join(err.value.errors[key])
    assert set(KernelBest.objects.values_list("pk", "median_us")) == bests


def test_a_job_made_from_a_variants_file_renumbers_that_files_results_and_refuses_unmarked_ones(triton):
    variants, results = _load(TRITON, "h200-variants.json"), _load(TRITON, "h200-results.json")
    job = _new_job(triton)
    assert job.source_variants_sha256 == variants_sha256(variants)
    ids = job.source_variant_ids
    assert any(k != str(v) for k, v in ids.items())                # the file's ids have gaps; the job's do not
    before = {(b.variant.params["impl"], b.shape, b.batch, b.median_us) for b in
              KernelBenchmark.objects.filter(variant__job=job).select_related("variant")}
    # the stored file has no fingerprint: its ids could be the file's or the job's
    with pytest.raises(InvalidInput) as err:
        kernel_job_ingest(job=job, results=results)
    assert "could use either numbering" in err.value.errors["results"][0]
    with pytest.raises(InvalidInput):
        kernel_job_ingest(job=job, builds=_load(TRITON, "sm90a-builds.json"))
    # with the file's fingerprint the rows are renumbered and land on the same variants
    kernel_job_ingest(job=job, results=_marked(results), builds=_load(TRITON, "sm90a-builds.json"))
    after = {(b.variant.params["impl"], b.shape, b.batch, b.median_us) for b in
             KernelBenchmark.objects.filter(variant__job=job).select_related("variant")}
    assert after == before
    assert KernelJob.objects.count() == 1


@pytest.fixture
def cuda(db, settings, tmp_path):
    settings.CEILING_KERNEL_CONFIG_DIR = tmp_path / "configs"
    return kernel_package_register(path=REAL_PACKAGES / CUDA)


def _cuda_new(package, results):
    return kernel_job_from_measurement(package=package, variants=_load(CUDA, "h200-variants.json"), results=results,
                                       builds=_load(CUDA, "sm90a-builds.json"))


def test_results_refused_after_their_builds_leave_the_builds_as_they_were(cuda):
    job = _cuda_new(cuda, _load(CUDA, "h200-results.json"))
    before = (job.compiler, job.builds_discarded)
    builds = copy.deepcopy(_load(CUDA, "sm90a-builds.json"))
    for b in builds:
        b["compiler"] = "nvcc 12.8"
    builds[0]["spills_bytes"] = 64
    bad = copy.deepcopy(_load(CUDA, "h200-results.json"))
    bad["results"][0]["median_us"] = 0.0
    with pytest.raises(InvalidInput):
        kernel_job_ingest(job=job, results=bad, builds=builds)
    job.refresh_from_db()
    assert (job.compiler, job.builds_discarded) == before
    kernel_job_ingest(job=job, results=_load(CUDA, "h200-results.json"))   # still takes the good file


def test_a_best_that_is_no_longer_correct_is_re_picked_from_the_jobs_of_its_bucket(cuda):
    results = _load(CUDA, "h200-results.json")
    first = _cuda_new(cuda, results)
    faster = copy.deepcopy(results)
    v32_1 = [r for r in faster["results"] if r["shape"] == "v32" and r["batch"] == 1 and r.get("median_us")]
    v32_1[-1]["median_us"] = 2.0
    for key in ("p10_us", "p90_us", "min_us", "roofline_fraction", "gbps", "tflops"):
        v32_1[-1].pop(key, None)
    second = _cuda_new(cuda, faster)
    row = KernelBest.objects.get(shape="v32", batch=1)
    assert row.job == second and row.median_us == 2.0
    # the second job's v32 batch 1 turns out wrong: the first job's fastest takes the entry back
    wrong = copy.deepcopy(faster)
    for r in wrong["results"]:
        if r["shape"] == "v32" and r["batch"] == 1:
            r.update(correct=False, median_us=None, p10_us=None, p90_us=None, min_us=None)
    kernel_job_ingest(job=second, results=wrong)
    row = KernelBest.objects.get(shape="v32", batch=1)
    expected = min(r["median_us"] for r in results["results"] if r["shape"] == "v32" and r["batch"] == 1
                   and r["correct"] and r.get("median_us"))
    assert row.job == first and row.median_us == pytest.approx(expected)
    assert "1" in json.loads(Path(row.config_path).read_text())
    # and where no job of the bucket has a correct variant left, the entry and its batch go
    for job, payload in ((first, results), (second, wrong)):
        none = copy.deepcopy(payload)
        for r in none["results"]:
            if r["shape"] == "v32" and r["batch"] == 64:
                r.update(correct=False, median_us=None, p10_us=None, p90_us=None, min_us=None)
        kernel_job_ingest(job=job, results=none)
    assert not KernelBest.objects.filter(shape="v32", batch=64).exists()
    assert "64" not in json.loads(Path(row.config_path).read_text())


def test_names_that_would_share_a_config_file_and_odd_numbers_are_refused(cuda):
    variants, results = _load(CUDA, "h200-variants.json"), _load(CUDA, "h200-results.json")
    twice = copy.deepcopy(variants)
    twice[-1]["variant_id"] = twice[0]["variant_id"]
    with pytest.raises(InvalidInput) as err:
        kernel_job_from_measurement(package=cuda, variants=twice, results={k: v for k, v in results.items()
                                                                          if k != "variants_sha256"})
    assert f"repeats variants.0" in err.value.errors[f"variants.{len(twice) - 1}.variant_id"][0]
    underscored = copy.deepcopy(results)
    underscored["device"]["name"] = "NVIDIA_H200"
    with pytest.raises(InvalidInput) as err:
        _cuda_new(cuda, underscored)
    assert "device.name" in err.value.errors
    endless = copy.deepcopy(results)
    endless["results"][3]["median_us"] = float("inf")
    with pytest.raises(InvalidInput) as err:
        _cuda_new(cuda, endless)
    assert "results.3.median_us" in err.value.errors
    assert not KernelJob.objects.exists()
    job = _cuda_new(cuda, {**results, "variants_sha256": results["variants_sha256"].upper()})
    assert job.status == "done"
    builds = [{**_load(CUDA, "sm90a-builds.json")[0], "compiler": "nvcc_13.0",
               "variant_id": job.variants.order_by("pk").first().pk}]
    with pytest.raises(InvalidInput) as err:
        kernel_builds_store(job_id=job.pk, payload=builds)
    assert "builds.0.compiler" in err.value.errors


def test_an_empty_results_list_changes_nothing_and_a_cc_mismatch_is_reported_once(cuda):
    results = _load(CUDA, "h200-results.json")
    job = _cuda_new(cuda, results)
    before = (job.device_name, job.hbm_gbps, job.bf16_tflops, KernelBest.objects.count())
    empty = {**results, "device": {**results["device"], "hbm_gbps": 1.0}, "results": []}
    with pytest.raises(InvalidInput) as err:
        kernel_job_ingest(job=job, results=empty)
    assert list(err.value.errors) == ["results"]
    job.refresh_from_db()
    assert (job.device_name, job.hbm_gbps, job.bf16_tflops, KernelBest.objects.count()) == before
    other = copy.deepcopy(results)
    other["device"]["cc"] = "8.0"
    with pytest.raises(InvalidInput) as err:
        kernel_job_ingest(job=job, results=other)
    assert "device.cc" in err.value.errors and "device.name" not in err.value.errors


def test_the_same_results_file_is_refused_a_second_job(triton):
    job = _new_job(triton)
    jobs = KernelJob.objects.count()
    spaced = json.loads(json.dumps(_load(TRITON, "h200-results.json"), indent=3))   # same content, other layout
    with pytest.raises(InvalidInput) as err:
        _new_job(triton, results=spaced)
    # the stored file carries no variants_sha256: the way back into the job names the variants file
    assert err.value.errors == {"results": [
        f"this results file is already stored as kernel job #{job.pk} (done); a second job would hold the same "
        f"measurements twice: to store it again into that job, run kernel_job_ingest {job.pk} results.json "
        "--variants variants.json (the results carry no variants_sha256: the variants file says their ids are its "
        "own)"]}
    # ... and that way works
    out = kernel_job_ingest(job=job, results=_load(TRITON, "h200-results.json"),
                            source_variants=_load(TRITON, "h200-variants.json"))
    assert out["results"]["stored"] == len(_load(TRITON, "h200-results.json")["results"])
    # the same measurements spelled otherwise: rows in another order, an id as text, 17 as 17.0,
    # the fingerprint added
    respelled = copy.deepcopy(_load(TRITON, "h200-results.json"))
    respelled["results"].reverse()
    respelled["results"][0]["variant_id"] = str(respelled["results"][0]["variant_id"])
    respelled["results"][1]["batch"] = float(respelled["results"][1]["batch"])
    respelled["variants_sha256"] = variants_sha256(_load(TRITON, "h200-variants.json"))
    with pytest.raises(InvalidInput) as err:
        _new_job(triton, results=respelled)
    assert f"already stored as kernel job #{job.pk}" in err.value.errors["results"][0]
    # a key the runner never writes makes another file, refused for that key
    extra = copy.deepcopy(_load(TRITON, "h200-results.json"))
    extra["results"][0]["extra_field"] = "x"
    with pytest.raises(InvalidInput) as err:
        _new_job(triton, results=extra)
    assert err.value.errors == {"results.0.extra_field": ["Extra inputs are not permitted"]}
    assert KernelJob.objects.count() == jobs


@pytest.mark.parametrize("key, value", [("median_us", "7.5"), ("median_us", True), ("max_abs_err", "0.01")])
def test_a_number_written_as_a_string_or_a_boolean_is_refused(triton, key, value):
    job = _new_job(triton)
    first = _load(TRITON, "h200-variants.json")[0]["variant_id"]
    row = {"variant_id": first, "shape": "v4-flash", "batch": 1, "correct": True, "median_us": 50.0, key: value}
    device = _load(TRITON, "h200-results.json")["device"]
    with pytest.raises(InvalidInput) as err:
        kernel_job_ingest(job=job, results=_marked({"device": device, "results": [row]}))
    assert err.value.errors == {f"results.0.{key}": ["Input should be a valid number"]}


def test_triton_results_without_a_triton_version_are_refused(triton):
    results = copy.deepcopy(_load(TRITON, "h200-results.json"))
    del results["device"]["triton"]
    with pytest.raises(InvalidInput) as err:
        _new_job(triton, results=results)
    assert "is required for a Triton package" in err.value.errors["device.triton"][0]
    assert not KernelJob.objects.exists()


def test_a_device_name_the_file_name_would_change_is_refused_and_leaves_the_real_devices_files(triton):
    """"NVIDIA/H200" would be written as device_name=NVIDIA_H200, the real H200's file."""
    job = _new_job(triton)
    files = {p: Path(p).read_text() for p in job.config_paths}
    other = copy.deepcopy(_load(TRITON, "h200-results.json"))
    other["device"]["name"] = "NVIDIA/H200"
    with pytest.raises(InvalidInput) as err:
        _new_job(triton, results=other)
    assert "should match pattern" in err.value.errors["device.name"][0]
    assert {p: Path(p).read_text() for p in job.config_paths} == files


def test_a_best_re_measured_wrong_is_re_picked_from_every_job_of_its_bucket(triton):
    first = _new_job(triton)
    rerun = copy.deepcopy(_load(TRITON, "h200-results.json"))   # the same variants measured again:
    rerun["device"]["hbm_gbps"] = 4250.0  # its own HBM calibration; the roofline numbers of the old one left out
    for r in rerun["results"]:
        for key in ("roofline_us", "roofline_fraction", "bound"):
            r.pop(key, None)
    second = _new_job(triton, results=rerun)
    best = KernelBest.objects.get(shape="v4-flash", batch=64)
    assert best.job_id == first.pk                         # a tie keeps the entry where it is
    params, median = best.variant.params, best.median_us
    file_id = next(k for k, v in first.source_variant_ids.items() if v == best.variant_id)
    wrong = {"device": _load(TRITON, "h200-results.json")["device"], "results": [
        {"variant_id": int(file_id), "shape": "v4-flash", "batch": 64, "correct": False, "error": "planted"}]}
    kernel_job_ingest(job=first, results=_marked(wrong))
    best.refresh_from_db()
    # the second job's measurement of the same variant, not the first job's next best
    assert (best.job_id, best.variant.params, best.median_us) == (second.pk, params, median)
    assert json.loads(Path(best.config_path).read_text())["64"] == params


@pytest.mark.parametrize("where, change, key, words", [
    ("device", {"triton": "3.6.0 evil/../x"}, "device.triton", "should match pattern"),
    ("device", {"cuda": "13.0/.."}, "device.cuda", "should match pattern"),
    ("device", {"sm_count": -5}, "device.sm_count", "greater than or equal to 1"),
    ("device", {"sm_count": 2**70}, "device.sm_count", "less than or equal to 100000"),
    ("device", {"l2_bytes": -1}, "device.l2_bytes", "greater than or equal to 0"),
    ("device", {"hbm_gbps": 1e-300}, "device.hbm_gbps", "greater than or equal to 1"),
    ("device", {"bf16_tflops": 0.0}, "device.bf16_tflops", "greater than or equal to 0.01"),
    ("row", {"reps": 2**70}, "results.0.reps", "less than or equal to 2147483647"),
    ("row", {"gbps": -1.0}, "results.0.gbps", "greater than or equal to 0"),
    ("row", {"roofline_fraction": -5.0}, "results.0.roofline_fraction", "greater than 0"),
    ("row", {"p10_us": 1e9}, "results.0", "p10_us 1e+09 is above median_us"),
    ("row", {"min_us": 60.0}, "results.0", "min_us 60 is above p10_us"),
    ("row", {"max_abs_err": -0.5}, "results.0", "max_abs_err -0.5 is negative"),
])
def test_impossible_device_facts_and_measurements_are_refused(triton, where, change, key, words):
    job = _new_job(triton)
    bests = set(KernelBest.objects.values_list("pk", "median_us"))
    first = _load(TRITON, "h200-variants.json")[0]["variant_id"]
    device = {**_load(TRITON, "h200-results.json")["device"], **(change if where == "device" else {})}
    row = {"variant_id": first, "shape": "v4-flash", "batch": 1, "correct": True, "median_us": 50.0,
           "p10_us": 49.0, "p90_us": 52.0, "min_us": 48.5, **(change if where == "row" else {})}
    with pytest.raises(InvalidInput) as err:
        kernel_job_ingest(job=job, results=_marked({"device": device, "results": [row]}))
    assert words in " ".join(err.value.errors[key]), err.value.errors
    assert set(KernelBest.objects.values_list("pk", "median_us")) == bests


@pytest.mark.parametrize("results, key", [
    ({"device": "NVIDIA H200", "results": []}, "device"),
    (["not", "an", "object"], "results"),
    ({"device": {"name": "NVIDIA H200"}, "results": []}, "device.cc"),
])
def test_a_results_file_of_the_wrong_shape_is_refused_with_the_field(triton, results, key):
    with pytest.raises(InvalidInput) as err:
        _new_job(triton, results=results)
    assert key in err.value.errors
    assert not KernelJob.objects.exists()


def test_a_variants_file_listing_one_variant_under_two_ids_is_refused(triton):
    variants = copy.deepcopy(_load(TRITON, "h200-variants.json"))
    variants.append({**variants[0], "variant_id": 999})
    with pytest.raises(InvalidInput) as err:
        kernel_job_from_measurement(package=triton, variants=variants, results=_load(TRITON, "h200-results.json"))
    first_id = variants[0]["variant_id"]
    assert err.value.errors == {f"variants.{len(variants) - 1}.params": [
        f"repeat the params of variants.0 (variant_id {first_id}): one variant, two ids, whose results could not "
        "be told apart"]}
    assert not KernelJob.objects.exists()


def test_every_problem_of_a_results_file_is_named_in_one_answer(triton):
    """A row the schema refuses does not hide the other rows' problems or the device's."""
    results = copy.deepcopy(_load(TRITON, "h200-results.json"))
    results["results"][2]["bogus"] = 1                               # a key the runner never writes
    results["results"].append(copy.deepcopy(results["results"][3]))  # a measurement given twice
    results["results"][5]["bound"] = "sideways"                     # neither memory nor compute
    results["device"]["sm_count"] = 0                              # not a GPU's SM count
    last = len(results["results"]) - 1
    with pytest.raises(InvalidInput) as err:
        _new_job(triton, results=results)
    errors = err.value.errors
    assert errors["results.2.bogus"] == ["Extra inputs are not permitted"]
    assert errors[f"results.{last}"][0].startswith("repeats results.3 (variant ")
    assert errors["results.5.bound"] == ["'sideways' must be memory or compute"]
    assert errors["device.sm_count"] == ["Input should be greater than or equal to 1"]
    assert not KernelJob.objects.exists()
