"""``manage.py kernel_job_ingest`` reads its files as the API reads a body: a key given twice in
an object or a number that is not finite is refused on one line naming the file and the problem,
exit status 2, and nothing is stored; a results row's errors, which the runner writes as ``NaN``
or ``Infinity`` for a wrong output, still go in."""
from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from kernels.models import KernelBenchmark, KernelBuild, KernelJob
from kernels.services import kernel_job_create
from kernels.tests.conftest import H200_DEVICE, build_fact, result_row

pytestmark = pytest.mark.django_db


def _job_and_rows(toy_package):
    job = kernel_job_create(package=toy_package, node=None, cc="9.0", dispatch=False)
    ids = [v.pk for v in job.variants.order_by("ordinal")]
    return job, ids


def _ingest(*args) -> CommandError:
    with pytest.raises(CommandError) as err:
        call_command("kernel_job_ingest", *args, stdout=io.StringIO(), stderr=io.StringIO())
    return err.value


def test_a_repeated_key_is_refused_naming_the_file_and_the_key(toy_package, tmp_path):
    job, ids = _job_and_rows(toy_package)
    row = json.dumps(result_row(ids[0], "small", 1, median_us=20.0))
    # the row gives median_us twice: plain json.loads would keep 5.0, the last
    text = '{"device": %s, "results": [%s]}' % (json.dumps(H200_DEVICE), row[:-1] + ', "median_us": 5.0}')
    path = tmp_path / "results.json"
    path.write_text(text)
    err = _ingest(str(job.pk), str(path))
    assert err.returncode == 2 and "\n" not in str(err)
    assert str(err) == f"{path}: nothing was stored: results.0.median_us: is given 2 times (20, 5): give it once"
    assert not KernelBenchmark.objects.exists()


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_number_that_is_not_finite_is_refused(toy_package, tmp_path, literal):
    job, ids = _job_and_rows(toy_package)
    builds = tmp_path / "builds.json"
    builds.write_text(json.dumps([build_fact(ids[0])]).replace('"build_s": 1.25', f'"build_s": {literal}'))
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"device": H200_DEVICE, "results": [result_row(ids[0], "small", 1, median_us=20.0)]}))
    err = _ingest(str(job.pk), str(results), "--builds", str(builds))
    assert err.returncode == 2
    assert str(err) == f"{builds}: nothing was stored: 0.build_s: {literal} is not a finite number"
    results.write_text(json.dumps({"device": {**H200_DEVICE, "hbm_gbps": 1.0}, "results": []})
                       .replace('"hbm_gbps": 1.0', f'"hbm_gbps": {literal}'))
    err = _ingest(str(job.pk), str(results))
    assert str(err) == f"{results}: nothing was stored: device.hbm_gbps: {literal} is not a finite number"
    assert not KernelBuild.objects.exists() and not KernelBenchmark.objects.exists()


def test_with_new_a_refused_file_creates_no_job(toy_package, tmp_path):
    variants = tmp_path / "variants.json"
    variants.write_text('[{"variant_id": 1, "variant_id": 2, "params": {}}]')
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"device": H200_DEVICE, "results": []}))
    err = _ingest(str(results), "--new", "toy_attn", "--variants", str(variants))
    assert err.returncode == 2
    assert str(err) == f"{variants}: nothing was stored: 0.variant_id: is given 2 times (1, 2): give it once"
    assert not KernelJob.objects.exists()


def test_a_wrong_rows_infinite_errors_as_the_runner_writes_them_go_in(toy_package, tmp_path):
    job, ids = _job_and_rows(toy_package)
    wrong = result_row(ids[0], "small", 1, median_us=1.0, correct=False, error="output has NaN or Inf values",
                       max_abs_err=float("nan"), max_rel_err=float("inf"))
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"device": H200_DEVICE, "results": [wrong]}))  # NaN and Infinity, as bench writes
    assert "NaN" in path.read_text() and "Infinity" in path.read_text()
    call_command("kernel_job_ingest", str(job.pk), str(path), stdout=io.StringIO())
    stored = KernelBenchmark.objects.get()
    assert stored.correct is False and stored.max_abs_err is None and stored.max_rel_err is None
