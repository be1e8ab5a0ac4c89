"""A grid number that is not finite (``1e400`` reads as infinity) is refused in one wording by the
API, the sweep form and ``manage.py sweep``, for a request rate, a point's time limit and an SLO:
``must be a finite number, got 1e400 (too large for a 64-bit float)``, naming the value as it was
written, at the same grid path."""
from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from benchmarks.models import BenchmarkSweep
from benchmarks.sweeps import non_finite_text
from benchmarks.tests.page_support import logged_in_client
from benchmarks.tests.sweep_support import form_words, sim_deployment_create
from controlplane.drf_defaults import NonFiniteNumber
from deployments.choices import DeploymentStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def starting():
    return sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING,
                                 recipe_name="finite-sim")


# (grid path, the body's grid with the number at %s, form fields, command options, form field named)
WHERE = {
    "duration": ("grid.duration_s", '"duration_s": %s', lambda t: {"duration": t},
                 lambda t: [f"--duration={t}"], "duration", "--duration"),
    "rate": ("grid.request_rates.1", '"request_rates": [2, %s]', lambda t: {"rates": f"2, {t}"},
             lambda t: [f"--request-rates=2,{t}"], "rates", "--request-rates"),
    "slo": ("grid.slo.ttft_s", '"slo": {"ttft_s": %s}', lambda t: {"slo_ttft_ms": t},
            lambda t: [f"--slo-ttft={t}"], "slo_ttft_ms", "--slo-ttft"),
}


@pytest.mark.parametrize("typed", ["1e400", "-1e400", "1E999"])
@pytest.mark.parametrize("where", sorted(WHERE))
def test_the_api_the_form_and_the_command_refuse_it_in_the_same_words(operator_api, operator, starting,
                                                                       where, typed) -> None:
    path, body_part, form_fields, options, field, option = WHERE[where]
    said = f"must be a finite number, got {typed} (too large for a 64-bit float)"

    body = '{"deployment": %d, "grid": {"concurrency": [1], "lengths": ["8:8"], "requests": 4, %s}}' % (
        starting.pk, body_part % typed)
    api = operator_api.post("/api/sweeps/", body, content_type="application/json")
    assert (api.status_code, api.json()) == (400, {path: [said]})

    form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {
        "deployment": starting.pk, "concurrency": "1", "lengths": "8:8", "requests": "4", **form_fields(typed)})
    assert form.status_code == 400
    assert form.context["errors"] == {field: [form_words(path, said)]}

    with pytest.raises(CommandError) as exc:
        call_command("sweep", "finite-sim", "--concurrency", "1", "--lengths", "8:8", "--requests", "4",
                     *options(typed), stdout=io.StringIO())
    assert str(exc.value).split("\n") == ["the sweep grid is refused:", f"  {option} ({path}): {said}"]
    assert not BenchmarkSweep.objects.exists()


def test_a_value_typed_as_infinity_or_nan_is_named_as_typed():
    assert non_finite_text(NonFiniteNumber(float("inf"), "inf")) == "must be a finite number, got inf (infinite)"
    assert non_finite_text(NonFiniteNumber(float("-inf"), "-Infinity")) == (
        "must be a finite number, got -Infinity (infinite)")
    assert non_finite_text(NonFiniteNumber(float("nan"), "nan")) == "must be a finite number, got nan (not a number)"
    # a float that kept no spelling, as JSON's decoders write it
    assert non_finite_text(float("inf")) == "must be a finite number, got Infinity (too large for a 64-bit float)"
