"""Ingest checks a results file's numbers against each other and against what the control plane
can recompute (the stored H200 runs of ``kernels/packages/*/results/`` as inputs):

* ``gbps``, ``tflops``, ``roofline_us``, ``roofline_fraction`` and ``bound`` must be what the
  runner's bench derives from the row's ``median_us``, the manifest's cost formulas and the device
  ceilings of the file; the error names the row, the field, the file's value and the recomputed one;
* a row marked correct is timed, unless ``error`` says why its timing failed (bench writes such rows);
* a row marked correct has errors that fit the tolerance and the reference of its shape and batch;
* a build using more than 255 registers per thread is refused;
* ``kernel_job_ingest`` prints a refusal once.
Nothing is stored when a file is refused."""
from __future__ import annotations

import copy
import json
import math
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from controlplane.errors import InvalidInput
from kernels.models import KernelBenchmark, KernelBest, KernelBuild, KernelJob
from kernels.services import kernel_job_from_measurement, kernel_package_register
from kernels.services.results import CROSSCHECK_REL_TOL, MAX_REGISTERS_PER_THREAD
from kernels.tests.conftest import REAL_PACKAGES

TRITON, CUDA = "sparse_mla_decode", "sparse_mla_decode_cuda"


def _load(name: str, file: str):
    return json.loads((REAL_PACKAGES / name / "results" / file).read_text())


@pytest.fixture
def packages(db, settings, tmp_path):
    settings.CEILING_KERNEL_CONFIG_DIR = tmp_path / "configs"
    return {name: kernel_package_register(path=REAL_PACKAGES / name) for name in (TRITON, CUDA)}


def _new_job(package, results, builds=None):
    return kernel_job_from_measurement(package=package, variants=_load(package.name, "h200-variants.json"),
                                       results=results, builds=builds)


def _refused(package, results, builds=None) -> dict[str, list[str]]:
    with pytest.raises(InvalidInput) as err:
        _new_job(package, results, builds)
    assert not KernelJob.objects.exists() and not KernelBenchmark.objects.exists()
    return err.value.errors


def _key(name: str, variant_id: int) -> str:
    from kernels.manifest import variant_key

    return next(variant_key(v["params"]) for v in _load(name, "h200-variants.json") if v["variant_id"] == variant_id)


def test_a_roofline_fraction_the_row_does_not_give_is_refused_with_the_recomputed_value(packages):
    results = copy.deepcopy(_load(TRITON, "h200-results.json"))
    row = results["results"][8]
    assert (row["variant_id"], row["shape"], row["batch"]) == (9, "v4-flash", 1)
    row["roofline_fraction"] = 5.0                        # 500 % of the roofline
    errors = _refused(packages[TRITON], results)
    assert list(errors) == ["results.8.roofline_fraction"]
    # the roofline from the manifest's bytes and the measured HBM rate, over the row's median
    # v4-flash: heads 64, d_qk 512, d_v 512, topk 640; batch 1
    nbytes = 1 * 640 * 512 * 2 + 1 * 64 * 512 * 2 + 1 * 64 * 512 * 2 + 1 * 640 * 4
    roof_us = nbytes / (results["device"]["hbm_gbps"] * 1e9) * 1e6
    assert roof_us == pytest.approx(row["roofline_us"], rel=1e-12)
    expected = roof_us / row["median_us"]
    assert round(expected, 4) == 0.0064
    assert errors["results.8.roofline_fraction"] == [
        f"variant {_key(TRITON, 9)}, shape v4-flash, batch 1: roofline_fraction is 5 in the file; roofline_us "
        f"{roof_us:.6g} / median_us {row['median_us']:.6g} gives {expected:.6g}"]


@pytest.mark.parametrize("field, factor", [("gbps", 2.0), ("tflops", 0.5), ("roofline_us", 1.05),
                                           ("gbps", 1 + 2 * CROSSCHECK_REL_TOL)])
def test_rates_and_rooflines_the_row_does_not_give_are_refused(packages, field, factor):
    results = copy.deepcopy(_load(CUDA, "h200-results.json"))
    row = results["results"][5]
    given = row[field] * factor
    row[field] = given
    errors = _refused(packages[CUDA], results)
    key = f"results.5.{field}"
    assert list(errors) == [key]
    message = errors[key][0]
    assert message.startswith(f"variant {_key(CUDA, row['variant_id'])}, shape v4-flash, batch 1: {field} is "
                              f"{given:.6g} in the file; ")
    assert message.endswith(f"gives {given / factor:.6g}")


def test_rounding_within_the_tolerance_and_a_missing_derived_number_are_taken(packages):
    results = copy.deepcopy(_load(CUDA, "h200-results.json"))
    results["results"][5]["gbps"] *= 1 + CROSSCHECK_REL_TOL / 2
    results["results"][6]["tflops"] = None
    job = _new_job(packages[CUDA], results)
    b = KernelBenchmark.objects.get(variant__job=job, variant__key=_key(CUDA, results["results"][6]["variant_id"]),
                                    shape="v4-flash", batch=1)
    flops = 2 * 1 * 64 * 640 * (512 + 512)                  # v4-flash (heads 64, topk 640, d_qk + d_v 1024), batch 1
    assert b.tflops == pytest.approx(flops / (results["results"][6]["median_us"] * 1e-6) / 1e12, rel=1e-12)


def test_a_bound_naming_the_smaller_roofline_term_is_refused(packages):
    results = copy.deepcopy(_load(CUDA, "h200-results.json"))
    results["results"][0]["bound"] = "compute"
    errors = _refused(packages[CUDA], results)
    assert list(errors) == ["results.0.bound"]
    assert "bound is compute in the file; the larger roofline term gives memory" in errors["results.0.bound"][0]


def test_a_correct_row_must_be_timed_unless_it_says_why_its_timing_failed(packages):
    results = copy.deepcopy(_load(CUDA, "h200-results.json"))
    v32_1 = [(i, r) for i, r in enumerate(results["results"]) if (r["shape"], r["batch"]) == ("v32", 1)]
    i, fastest = min(v32_1, key=lambda ir: ir[1]["median_us"])
    fastest.update(median_us=None, p10_us=None, p90_us=None, min_us=None, reps=0, gbps=None, tflops=None,
                   roofline_fraction=None, timing=None)
    errors = _refused(packages[CUDA], results)
    assert errors == {f"results.{i}.median_us": [
        f"variant {_key(CUDA, fastest['variant_id'])}, shape v32, batch 1: marked correct but not timed: the runner "
        "times every correct row, and one whose timing failed carries the reason in error (\"timing failed: ...\")"]}
    # what bench writes when the timing of a correct variant fails: stored correct, untimed, never best
    fastest["error"] = "timing failed: RuntimeError: CUDA error: an illegal memory access was encountered"
    job = _new_job(packages[CUDA], results, _load(CUDA, "sm90a-builds.json"))
    b = KernelBenchmark.objects.get(variant__job=job, variant__key=_key(CUDA, fastest["variant_id"]), shape="v32",
                                    batch=1)
    assert (b.correct, b.median_us, b.gbps, b.roofline_fraction) == (True, None, None, None)
    assert b.error.startswith("timing failed: RuntimeError")
    assert (job.benchmarks_correct, job.benchmarks_wrong) == (378, 0)
    second = sorted(r["median_us"] for _, r in v32_1 if r["median_us"] is not None)[0]
    assert KernelBest.objects.get(shape="v32", batch=1).median_us == pytest.approx(second)


def test_a_correct_row_whose_error_breaks_the_reference_of_its_shape_and_batch_is_refused(packages):
    results = copy.deepcopy(_load(TRITON, "h200-results.json"))
    row = results["results"][8]
    max_ref = row["max_abs_err"] / row["max_rel_err"]          # 1.9921875 for every row of v4-flash batch 1
    assert max_ref == pytest.approx(1.9921875)
    row["max_abs_err"] = 10.0
    errors = _refused(packages[TRITON], results)
    assert errors == {"results.8.max_abs_err": [
        f"variant {_key(TRITON, 9)}, shape v4-flash, batch 1: max_abs_err / max_rel_err gives max |ref| "
        f"{10.0 / row['max_rel_err']:.6g}, the other correct rows of shape v4-flash, batch 1 give 1.99219: one run "
        "compares every variant with the same reference output, so the errors of this row were not measured "
        "against it"]}
    # both errors edited consistently: the element with a 10.0 error fails atol + rtol x 1.99
    row["max_rel_err"] = 10.0 / max_ref
    errors = _refused(packages[TRITON], results)
    allowed = 0.02 + 0.02 * max_ref
    assert errors == {"results.8.max_abs_err": [
        f"variant {_key(TRITON, 9)}, shape v4-flash, batch 1: max_abs_err 10 exceeds atol 0.02 + rtol 0.02 x "
        f"max |ref| 1.99219 (max_abs_err / max_rel_err) = {allowed:.6g}: the element with that error fails the "
        "manifest's tolerance, so the row cannot be correct"]}


@pytest.mark.parametrize("change, key, words", [
    ({"max_abs_err": float("nan")}, "max_abs_err", "max_abs_err is nan on a row marked correct"),
    ({"max_abs_err": float("inf")}, "max_abs_err", "max_abs_err is inf on a row marked correct"),
    ({"max_rel_err": float("nan")}, "max_rel_err", "max_rel_err is nan on a row marked correct"),
    ({"max_rel_err": 0.0}, "max_rel_err", "max_rel_err is 0 with max_abs_err 0.000976562"),
    ({"max_abs_err": 0.05, "max_rel_err": float("inf")}, "max_abs_err",
     "max_abs_err 0.05 with an infinite max_rel_err (a reference of zeros, where only atol applies) exceeds atol 0.02"),
])
def test_errors_a_correct_row_cannot_have_are_refused(packages, change, key, words):
    results = copy.deepcopy(_load(CUDA, "h200-results.json"))
    results["results"][0].update(change)
    errors = _refused(packages[CUDA], results)
    assert list(errors) == [f"results.0.{key}"] and words in errors[f"results.0.{key}"][0]


def test_what_the_errors_cannot_prove_is_taken_as_marked(packages):
    """A reference of zeros within atol, an error given without max_rel_err (the tolerance grows
    with |ref|, which it does not tell), and a wrong row with any errors are stored as given."""
    results = copy.deepcopy(_load(CUDA, "h200-results.json"))
    results["results"][0].update(max_abs_err=0.015, max_rel_err=float("inf"))
    results["results"][1].update(max_abs_err=10.0, max_rel_err=None)
    results["results"][2].update(correct=False, max_abs_err=float("nan"), max_rel_err=float("nan"), median_us=None,
                                 error="output has NaN or Inf values")
    job = _new_job(packages[CUDA], results)
    rows = {b.variant.key: b for b in KernelBenchmark.objects.filter(variant__job=job, shape="v4-flash", batch=1)
            .select_related("variant")}
    first, second, third = (rows[_key(CUDA, results["results"][k]["variant_id"])] for k in range(3))
    assert (first.correct, first.max_abs_err, first.max_rel_err) == (True, 0.015, None)   # inf is not stored
    assert (second.correct, second.max_abs_err) == (True, 10.0)
    assert third.correct is False and third.max_abs_err is None and third.median_us is None


def test_the_stored_h200_results_pass_every_check_unchanged(packages):
    for name, rows in ((TRITON, 616), (CUDA, 378)):
        results = _load(name, "h200-results.json")
        job = _new_job(packages[name], results)
        assert (job.benchmarks_total, job.benchmarks_correct) == (rows, rows)
        first = results["results"][0]
        b = KernelBenchmark.objects.get(variant__job=job, variant__key=_key(name, first["variant_id"]),
                                        shape=first["shape"], batch=first["batch"])
        assert (b.gbps, b.tflops, b.roofline_us, b.roofline_fraction, b.bound) == (
            first["gbps"], first["tflops"], first["roofline_us"], first["roofline_fraction"], "memory")


def test_a_build_using_more_registers_than_a_thread_may_have_is_refused(packages):
    builds = copy.deepcopy(_load(CUDA, "sm90a-builds.json"))
    builds[0]["registers"] = 100000
    errors = _refused(packages[CUDA], _load(CUDA, "h200-results.json"), builds)
    assert errors == {"builds.0.registers": [
        "100000 registers per thread: no NVIDIA GPU since compute capability 3.5 lets a thread use more than 255 "
        "(CUDA C++ Programming Guide, Technical Specifications per Compute Capability)"]}
    assert not KernelBuild.objects.exists()
    builds[0]["registers"] = MAX_REGISTERS_PER_THREAD
    job = _new_job(packages[CUDA], _load(CUDA, "h200-results.json"), builds)
    assert KernelBuild.objects.get(variant__job=job, variant__key=_key(CUDA, builds[0]["variant_id"])).registers == 255


def test_the_command_prints_a_refusal_once(packages, tmp_path):
    results = copy.deepcopy(_load(CUDA, "h200-results.json"))
    results["results"][5]["roofline_fraction"] = 5.0
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    variants = str(REAL_PACKAGES / CUDA / "results" / "h200-variants.json")
    err = StringIO()
    with pytest.raises(CommandError) as exc:
        call_command("kernel_job_ingest", str(path), new=CUDA, variants=variants, stderr=err, stdout=StringIO())
    assert str(exc.value).startswith("nothing was stored: results.5.roofline_fraction: variant ")
    assert "roofline_fraction is 5 in the file" in str(exc.value)
    assert err.getvalue() == ""                               # the one reason is the error, not printed first
    results["results"][6]["gbps"] = 1e6
    path.write_text(json.dumps(results))
    with pytest.raises(CommandError) as exc:
        call_command("kernel_job_ingest", str(path), new=CUDA, variants=variants, stderr=err, stdout=StringIO())
    assert str(exc.value) == "nothing was stored: 2 problems, listed above"
    lines = err.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("results.5.roofline_fraction: ") and \
        lines[1].startswith("results.6.gbps: variant ")
    assert not KernelJob.objects.exists()
