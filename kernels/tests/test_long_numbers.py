"""A number of thousands of digits (Python's int() refuses more than 4300) gets the field's own
refusal, never a 500: the job page's and the variant table's ``?batch=``, the job form's
``batches`` and ``params``, a recipe's ``best:<id>``, ``manage.py kernel_job --batches`` and
``manage.py kernel_job_ingest <id>``, and a measured job whose variants file named a variant with
such a text."""
from __future__ import annotations

import html
import io
import re

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from controlplane.errors import InvalidInput
from deployments.examples import seed_node_facts_example
from deployments.recipes import recipe_validate
from kernels.models import KernelJob
from kernels.tests.test_kernels_recipes import _seed_pd
from deployments.tests.factories import LONG_DIGITS, LONG_DIGITS_SHOWN, signed_in_client

pytestmark = pytest.mark.django_db

LONG, SHOWN = LONG_DIGITS, LONG_DIGITS_SHOWN


def _client(user=None) -> Client:
    return signed_in_client(user, raise_request_exception=False)


@pytest.mark.parametrize("path", ["", "variants/"], ids=["job-page", "variant-table"])
def test_a_batch_of_thousands_of_digits_is_not_a_batch_of_the_job(viewer, measured_job, path):
    response = _client(viewer).get(f"/kernels/jobs/{measured_job.pk}/{path}", {"batch": LONG})
    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    assert f"batch: {SHOWN} is not a batch of this job; batches: 1, 4" in page
    # as a batch of 20 digits is named, and the table falls back to the smallest batch
    twenty = html.unescape(_client(viewer).get(f"/kernels/jobs/{measured_job.pk}/{path}",
                                               {"batch": "9" * 20}).content.decode())
    assert f"batch: {'9' * 20} is not a batch of this job; batches: 1, 4" in twenty
    assert re.findall(r'data-variant="([0-9]+)"', page) == re.findall(r'data-variant="([0-9]+)"', twenty)


def test_a_batch_with_leading_zeros_is_read_as_its_number(viewer, measured_job):
    page = html.unescape(_client(viewer).get(f"/kernels/jobs/{measured_job.pk}/",
                                             {"batch": "0" * 5000 + "4"}).content.decode())
    assert "is not a batch of this job" not in page and "at batch 4" in page


def _post_job(operator, **fields):
    response = _client(operator).post("/kernels/packages/toy_attn/jobs/new/",
                                      {"node": "h200-box", "cc": "9.0", "shapes": ["small"], "batches": "1", **fields})
    return response, html.unescape(response.content.decode())


def test_the_job_form_refuses_a_batch_of_thousands_of_digits_as_any_batch_the_manifest_lacks(
        operator, toy_package, h200_node):
    response, page = _post_job(operator, batches=f"1,{LONG},{'9' * 20}")
    assert response.status_code == 400 and not KernelJob.objects.exists()
    assert response.context["errors"]["batches"] == [f"{SHOWN} is not a batch size of the manifest ([1, 4])",
                                                     f"{'9' * 20} is not a batch size of the manifest ([1, 4])"]
    assert f"{SHOWN} is not a batch size of the manifest ([1, 4])" in page


def test_the_job_form_names_a_batch_of_thousands_of_digits_given_twice(operator, toy_package, h200_node):
    response, _ = _post_job(operator, batches=f"{LONG},{LONG}")
    assert response.status_code == 400 and not KernelJob.objects.exists()
    assert response.context["errors"]["batches"] == [f"Batch {SHOWN} is given twice: give each once.",
                                                     f"{SHOWN} is not a batch size of the manifest ([1, 4])"]


@pytest.mark.parametrize("value", [LONG, "-" + LONG], ids=["5000-digits", "minus-5000-digits"])
def test_the_job_form_refuses_a_grid_value_of_thousands_of_digits(operator, toy_package, h200_node, value):
    response, page = _post_job(operator, params=f"BLOCK={value}")
    assert response.status_code == 400 and not KernelJob.objects.exists()
    assert "is not one of the grid's values [16, 32, 64]" in page


def test_a_recipe_naming_a_best_variant_of_thousands_of_digits_is_refused_at_its_path(toy_package):
    spec = _seed_pd()["spec"]
    spec["kernels"] = [{"package": "toy_attn", "config": "best:" + LONG}]
    with pytest.raises(InvalidInput) as err:
        recipe_validate(engine="sglang", topology="pd", spec=spec, node=seed_node_facts_example())
    assert err.value.errors["spec.kernels.0.config"] == [f"no best kernel variant with id {SHOWN}"]


def test_kernel_job_refuses_a_batch_of_thousands_of_digits(toy_package, h200_node):
    with pytest.raises(CommandError) as err:
        call_command("kernel_job", "toy_attn", "--node", "h200-box", "--cc", "9.0", "--batches", f"1,{LONG}",
                     stdout=io.StringIO(), stderr=io.StringIO())
    assert err.value.returncode == 2 and not KernelJob.objects.exists()
    assert str(err.value) == f"the job was not created: batches: {SHOWN} is not a batch size of the manifest ([1, 4])"


def test_kernel_job_ingest_refuses_a_job_id_of_thousands_of_digits(tmp_path):
    with pytest.raises(CommandError) as err:
        call_command("kernel_job_ingest", LONG, str(tmp_path / "results.json"), stdout=io.StringIO(),
                     stderr=io.StringIO())
    assert str(err.value) == f"no kernel job with id {SHOWN}"


def test_a_measured_job_whose_file_named_a_variant_with_thousands_of_digits_is_shown(viewer, measured_job):
    first, *rest = measured_job.variants.order_by("pk").values_list("pk", flat=True)
    KernelJob.objects.filter(pk=measured_job.pk).update(
        source_variant_ids={LONG: first, **{str(i): pk for i, pk in enumerate(rest, 1)}},
        source_variants_sha256="0" * 64)
    measured_job.refresh_from_db()
    assert measured_job.source_ids()[first] == LONG
    response = _client(viewer).get(f"/kernels/jobs/{measured_job.pk}/")
    assert response.status_code == 200
