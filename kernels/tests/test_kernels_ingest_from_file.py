"""A job made from a measurement brought back from another machine (``kernel_job_ingest --new``),
on the stored H200 run of the flagship package: refusals name the variant by its id in the
variants file, the parameter or constraint at fault, and every such variant at once; an empty
variants file says so; the job's grid summary adds up and its shapes and batches are those
measured; the variants file's ids stay visible next to this database's (CSV, JSON, API); a
best needs build facts; and the job command's --wait is a number of seconds >= 0."""
from __future__ import annotations

import copy
import csv
import io
import json
from itertools import product

import pytest

from controlplane.errors import InvalidInput
from kernels.manifest import grid_refusal, manifest_from_stored
from kernels.models import KernelJob
from kernels.selectors import variant_table
from kernels.services import kernel_job_export_csv, kernel_job_from_measurement, kernel_package_register
from kernels.services.common import job_manifest
from kernels.tests.conftest import REAL_PACKAGES

NAME = "sparse_mla_decode"


def _load(file: str):
    return json.loads((REAL_PACKAGES / NAME / "results" / file).read_text())


@pytest.fixture
def package(db, settings, tmp_path):
    settings.CEILING_KERNEL_CONFIG_DIR = tmp_path / "configs"
    return kernel_package_register(path=REAL_PACKAGES / NAME)


def _unfingerprinted():
    return {k: v for k, v in _load("h200-results.json").items() if k != "variants_sha256"}


def test_every_variant_outside_the_grid_is_named_by_its_file_id_with_the_parameter_at_fault(package):
    variants = _load("h200-variants.json")[:4]
    ids = [v["variant_id"] for v in variants]
    variants[1] = {**variants[1], "params": {**variants[1]["params"], "BLOCK_N": 48}}
    variants[3] = {**variants[3], "params": {**variants[3]["params"], "colour": "red"}}
    with pytest.raises(InvalidInput) as err:
        kernel_job_from_measurement(package=package, variants=variants, results=_unfingerprinted())
    messages = err.value.errors["variants"]
    assert len(messages) == 2, messages
    assert isinstance(ids[1], int)   # named in JSON's spelling: a number unquoted
    assert messages[0].startswith(f"variants.1 (variant_id {ids[1]}): ")
    block_n = manifest_from_stored(package.manifest).grid["BLOCK_N"]
    assert messages[0].endswith(f"is not in {NAME}'s grid: BLOCK_N=48 is not one of the grid's values {block_n}")
    assert messages[1].startswith(f"variants.3 (variant_id {ids[3]}): ")
    assert "'colour' is not a parameter of the grid" in messages[1]
    assert not KernelJob.objects.exists()


def test_the_refusal_names_the_constraint_that_refuses_a_combination(package):
    manifest = manifest_from_stored(package.manifest)
    # a combination of grid values that some constraint refuses: the first one found
    names = list(manifest.grid)
    for combo in product(*manifest.grid.values()):
        params = dict(zip(names, combo))
        refusing = [i for i, c in enumerate(manifest.constraints) if not c.evaluate(params)]
        if refusing:
            break
    else:
        pytest.skip("the grid has no refused combination")
    why = grid_refusal(manifest, params)
    assert why == f"constraint {refusing[0]} ({manifest.constraints[refusing[0]].text}) refuses it"
    assert grid_refusal(manifest, {**params, "impl": "nope"}).startswith("impl='nope' is not one of the grid's values")
    assert grid_refusal(manifest, {**params, "BLOCK_H": str(params["BLOCK_H"])}) == (
        f"BLOCK_H='{params['BLOCK_H']}' is not one of the grid's values {manifest.grid['BLOCK_H']}")
    assert grid_refusal(manifest, {k: v for k, v in params.items() if k != "impl"}) == "it lacks impl"
    assert grid_refusal(manifest, [1, 2]) == "params must be an object of parameter: value, got [1, 2]"


def test_an_empty_variants_file_is_refused_as_empty(package):
    with pytest.raises(InvalidInput) as err:
        kernel_job_from_measurement(package=package, variants=[], results=_unfingerprinted())
    assert err.value.errors == {"variants": [
        "the variants file lists no variant: give the variants.json the results were measured from"]}
    assert not KernelJob.objects.exists()


def test_the_jobs_grid_summary_adds_up_and_its_shapes_and_batches_are_those_measured(package):
    variants, results = _load("h200-variants.json"), _load("h200-results.json")
    job = kernel_job_from_measurement(package=package, variants=variants, results=results)
    g = job.grid_summary
    assert g["variants"] == len(variants) == job.variants.count()
    assert g["combinations"] == g["variants"] + sum(p["pruned"] for p in g["pruned"]) == \
        g["variants"] + g["pruned_total"]
    only = [p for p in g["pruned"] if p["source"] == "variants_file"]
    assert only and only[0]["pruned"] > 0 and only[0]["index"] is None
    assert all(isinstance(p["index"], int) for p in g["pruned"] if p["source"] == "constraint")
    measured_shapes = list(dict.fromkeys(r["shape"] for r in results["results"]))
    assert job.shapes == measured_shapes and len(job.shapes) == 2
    assert job.batches == sorted({r["batch"] for r in results["results"]}) == [1, 2, 4, 8, 16, 32, 64]


def test_results_of_a_shape_the_job_does_not_benchmark_are_refused(package):
    from kernels.runner.package import variants_sha256
    from kernels.services import kernel_job_ingest

    variants, results = _load("h200-variants.json"), _load("h200-results.json")
    first_shape = results["results"][0]["shape"]
    kept = [r for r in results["results"] if r["shape"] == first_shape]
    job = kernel_job_from_measurement(package=package, variants=variants,
                                      results={**_unfingerprinted(), "results": kept})
    assert job.shapes == [first_shape]
    other = next(r for r in results["results"] if r["shape"] != first_shape)
    # a later file of the same run (it carries the variants file's fingerprint and ids)
    with pytest.raises(InvalidInput) as err:
        kernel_job_ingest(job=job, results={**results, "variants_sha256": variants_sha256(variants),
                                            "results": [other]})
    assert err.value.errors["results.0.shape"] == [
        f"{other['shape']!r} is not a shape kernel job #{job.pk} benchmarks ({first_shape})"]


def test_the_variants_files_ids_show_next_to_the_jobs_in_csv_and_the_variant_table(package):
    variants, results = _load("h200-variants.json"), _load("h200-results.json")
    job = kernel_job_from_measurement(package=package, variants=variants, results=results)
    file_id_of = {json.dumps(v["params"], sort_keys=True): str(v["variant_id"]) for v in variants}
    rows = list(csv.DictReader(io.StringIO(kernel_job_export_csv(job=job))))
    assert rows and list(rows[0])[:3] == ["variant_id", "source_variant_id", "key"]
    by_pk = {v.pk: v for v in job.variants.all()}
    for r in rows:
        v = by_pk[int(r["variant_id"])]
        assert r["source_variant_id"] == file_id_of[json.dumps(v.params, sort_keys=True)]
    # a result row in the file and the CSV row of its measurement carry the same id
    sample = results["results"][0]
    match = [r for r in rows if r["source_variant_id"] == str(sample["variant_id"])
             and r["shape"] == sample["shape"] and r["batch"] == str(sample["batch"])]
    assert len(match) == 1 and float(match[0]["median_us"]) == pytest.approx(sample["median_us"])
    table = variant_table(job=job)
    # the table (and the API's rows) keep the file's ids as it wrote them: JSON numbers here
    assert {row["source_variant_id"] for row in table.rows} == {v["variant_id"] for v in variants}
    assert job_manifest(job).name == NAME


def test_measurements_without_build_facts_pick_no_best_until_the_builds_arrive(package):
    from kernels.models import KernelBest
    from kernels.runner.package import variants_sha256
    from kernels.services import kernel_job_ingest

    variants = _load("h200-variants.json")
    job = kernel_job_from_measurement(package=package, variants=variants, results=_load("h200-results.json"))
    assert job.benchmarks_correct > 0 and not KernelBest.objects.exists() and not job.config_paths
    # the builds of the same run (they carry the file's ids: the variants file says so)
    kernel_job_ingest(job=job, builds=_load("sm90a-builds.json"), source_variants=variants)
    job.refresh_from_db()
    assert job.builds_ok == len(variants) and KernelBest.objects.filter(job=job).count() == 14
    assert job.config_paths
    # a variants file other than the job's is refused, naming both fingerprints
    with pytest.raises(InvalidInput) as err:
        kernel_job_ingest(job=job, results=_unfingerprinted(), source_variants=variants[1:])
    assert variants_sha256(variants[1:]) in err.value.errors["variants"][0]
    assert job.source_variants_sha256 in err.value.errors["variants"][0]


@pytest.mark.parametrize("bad, shown", [(None, "null"), (True, "true"), ("", "''"), (1.5, "1.5")])
def test_a_variant_id_that_is_not_a_number_or_text_is_refused(package, bad, shown):
    variants = _load("h200-variants.json")
    variants[2] = {**variants[2], "variant_id": bad}
    with pytest.raises(InvalidInput) as err:
        kernel_job_from_measurement(package=package, variants=variants, results=_unfingerprinted())
    assert err.value.errors == {"variants.2.variant_id": [
        f"must be a whole number or a non-empty text, got {shown}"]}


def test_a_results_file_without_measurements_makes_no_job(package):
    with pytest.raises(InvalidInput) as err:
        kernel_job_from_measurement(package=package, variants=_load("h200-variants.json"),
                                    results={**_unfingerprinted(), "results": []})
    assert err.value.errors == {"results": [
        "the results file holds no measurement: a job made from it would be done with nothing to show"]}
    assert not KernelJob.objects.exists()


def test_the_command_refuses_a_job_id_with_new(package, tmp_path):
    from django.core.management import CommandError, call_command

    results = REAL_PACKAGES / NAME / "results" / "h200-results.json"
    with pytest.raises(CommandError, match="--new creates a job: give only the results file, not a job id"):
        call_command("kernel_job_ingest", "1", str(results), new=NAME,
                     variants=str(REAL_PACKAGES / NAME / "results" / "h200-variants.json"), stdout=io.StringIO())
    assert not KernelJob.objects.exists()
    out = io.StringIO()
    call_command("kernel_job_ingest", str(results), new=NAME,
                 variants=str(REAL_PACKAGES / NAME / "results" / "h200-variants.json"), stdout=out)
    assert "no best variant: the job holds no build facts (give --builds builds.json)" in out.getvalue()


def test_a_new_job_whose_device_name_and_compute_capability_disagree_is_refused(package):
    results = _unfingerprinted()
    results["device"] = {**results["device"], "cc": "8.0"}   # an H200 is 9.0
    with pytest.raises(InvalidInput) as err:
        kernel_job_from_measurement(package=package, variants=_load("h200-variants.json"), results=results)
    assert err.value.errors == {"device.cc": [
        "NVIDIA H200 is a compute capability 9.0 GPU (NVIDIA's CUDA GPUs list); the file says 8.0"]}
    assert not KernelJob.objects.exists()


@pytest.mark.parametrize("wait", ["-5", "nan", "inf"])
def test_the_job_command_refuses_a_negative_or_non_number_wait(package, wait):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match=r"--wait must be a finite number of seconds >= 0"):
        call_command("kernel_job", NAME, "--external", "--cc", "9.0", "--wait", wait, stdout=io.StringIO())
    assert not KernelJob.objects.exists()


def test_a_timing_faster_than_the_gpu_allows_is_refused(package):
    """A row doctored to 1 µs with every derived number scaled to match still claims more than
    the H200's datasheet peaks allow over the run's own measured ceilings."""
    results = copy.deepcopy(_load("h200-results.json"))
    i, row = next((i, r) for i, r in enumerate(results["results"])
                  if (r["shape"], r["batch"]) == ("v4-flash", 16) and r["correct"])
    scale = row["median_us"] / 1.0
    for key in ("median_us", "p10_us", "p90_us", "min_us"):
        row[key] = row[key] / scale
    for key in ("gbps", "tflops", "roofline_fraction"):
        row[key] = row[key] * scale
    with pytest.raises(InvalidInput) as err:
        kernel_job_from_measurement(package=package, variants=_load("h200-variants.json"), results=results,
                                    builds=_load("sm90a-builds.json"))
    [message] = err.value.errors[f"results.{i}.median_us"]
    assert "faster than the roofline the run measured" in message and "at most 1.3x" in message
    assert not KernelJob.objects.exists()


def test_renumbered_ids_or_other_driver_text_do_not_make_a_stored_run_new(package):
    variants, results, builds = _load("h200-variants.json"), _load("h200-results.json"), _load("sm90a-builds.json")
    job = kernel_job_from_measurement(package=package, variants=variants, results=results, builds=builds)
    shifted = {str(v["variant_id"]): v["variant_id"] + 1000 for v in variants}
    v2 = [{**v, "variant_id": shifted[str(v["variant_id"])]} for v in variants]
    r2 = copy.deepcopy(results)
    for r in r2["results"]:
        r["variant_id"] = shifted[str(r["variant_id"])]
    r2["device"]["driver"] = r2["device"]["driver"] + " "
    b2 = [{**b, "variant_id": shifted[str(b["variant_id"])]} for b in builds]
    with pytest.raises(InvalidInput) as err:
        kernel_job_from_measurement(package=package, variants=v2, results=r2, builds=b2)
    assert f"already stored as kernel job #{job.pk}" in err.value.errors["results"][0]
    assert KernelJob.objects.count() == 1


@pytest.mark.parametrize("name, cc, key, words", [
    ("nvidia h200", "8.0", "device.cc", "nvidia h200 is a compute capability 9.0 GPU"),
    ("NVIDIA  H200", "9.0", "device.name", "should match pattern"),
])
def test_a_device_name_in_other_case_or_spacing_gets_no_bucket_of_its_own(package, name, cc, key, words):
    results = _unfingerprinted()
    results["device"] = {**results["device"], "name": name, "cc": cc}
    with pytest.raises(InvalidInput) as err:
        kernel_job_from_measurement(package=package, variants=_load("h200-variants.json"), results=results)
    assert words in " ".join(err.value.errors[key]), err.value.errors


def test_a_device_stored_under_one_spelling_is_refused_in_another(package):
    kernel_job_from_measurement(package=package, variants=_load("h200-variants.json"),
                                results=_load("h200-results.json"))
    other = copy.deepcopy(_load("h200-results.json"))
    other["device"]["name"] = "Nvidia H200"
    other["results"] = other["results"][:10]
    with pytest.raises(InvalidInput) as err:
        kernel_job_from_measurement(package=package, variants=_load("h200-variants.json"), results=other)
    assert err.value.errors["device.name"] == [
        "'Nvidia H200' is 'NVIDIA H200' spelled in another letter case, as stored kernel jobs name it: write it "
        "'NVIDIA H200' (one GPU, one set of config files)"]


def test_the_job_command_says_on_one_line_that_a_job_still_going_after_wait_was_left_running(package):
    """An external job waits for builds made elsewhere, so it is still pending when a short
    ``--wait`` runs out: exit status 3 (neither success nor a failed job nor a refusal), one line
    naming the job, its page and how to cancel it; the job stays as it was."""
    from django.core.management import CommandError, call_command

    out = io.StringIO()
    with pytest.raises(CommandError) as err:
        call_command("kernel_job", NAME, "--external", "--cc", "9.0", "--wait", "0.2", stdout=out)
    job = KernelJob.objects.get()
    assert err.value.returncode == 3 and "\n" not in str(err.value)
    assert str(err.value) == (
        f"kernel job #{job.pk} is still pending after --wait 0.2 s and was not cancelled: follow it at "
        f"/kernels/jobs/{job.pk}/ or GET /api/kernel-jobs/{job.pk}/; cancel it with POST /api/kernel-jobs/{job.pk}/cancel/")
    assert job.status == "pending" and not job.cancel_requested
