"""The API takes a sweep grid's ``lengths`` as the comma list the sweep form takes
(``"16:16,8:8"``, spaces as separators or around a colon too), besides a list of pairs; each pair
is judged at its own index, and an empty item is refused in the words of every comma list."""
from __future__ import annotations

import pytest
from django.urls import reverse

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkSweep
from benchmarks.tests.page_support import logged_in_client
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def starting():
    return sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING,
                                 recipe_name="lengths-sim")


def _post(api, deployment, lengths):
    return api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {
        "concurrency": [1], "lengths": lengths, "requests": 4}}, format="json")


@pytest.mark.parametrize("text", ["16:16,8:8", "16:16, 8:8", " 16 : 16  8:8 "])
def test_a_comma_text_of_pairs_is_the_same_grid_as_the_list(operator_api, starting, text,
                                                            django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        response = _post(operator_api, starting, text)
    assert response.status_code == 201, response.json()
    assert response.json()["grid"]["lengths"] == [[16, 16], [8, 8]]
    BenchmarkSweep.objects.update(status=SweepStatus.CANCELLED)

    with django_capture_on_commit_callbacks(execute=False):
        listed = _post(operator_api, starting, [[16, 16], [8, 8]])
    assert listed.status_code == 201, listed.json()
    assert listed.json()["grid"] == response.json()["grid"]


def test_the_api_and_the_form_give_the_same_grid_for_the_same_text(operator_api, operator, starting,
                                                                   django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {
            "deployment": starting.pk, "concurrency": "1", "lengths": "16:16,8:8", "requests": "4"})
    assert form.status_code == 302
    from_form = BenchmarkSweep.objects.get()
    from_form.status = SweepStatus.CANCELLED
    from_form.save(update_fields=["status"])
    with django_capture_on_commit_callbacks(execute=False):
        api = _post(operator_api, starting, "16:16,8:8")
    assert api.status_code == 201, api.json()
    assert api.json()["grid"] == from_form.grid


def test_each_bad_pair_of_the_text_is_named_at_its_index(operator_api, starting) -> None:
    response = _post(operator_api, starting, "16:16,abc,8:0")
    assert response.status_code == 400
    assert response.json() == {
        "grid.lengths.1": ["must be [input_len, output_len] or 'in:out' with 1..1000000 tokens, "
                           "got the string \"abc\""],
        "grid.lengths.2": ["must be [input_len, output_len] or 'in:out' with 1..1000000 tokens, "
                           "got the string \"8:0\""]}
    assert not BenchmarkSweep.objects.exists()


@pytest.mark.parametrize("text,index", [("16:16,,8:8", 2), ("16:16,", 2), (",8:8", 1)])
def test_an_empty_item_of_the_text_is_refused(operator_api, starting, text, index) -> None:
    response = _post(operator_api, starting, text)
    assert (response.status_code, response.json()) == (
        400, {"grid.lengths": [f"item {index} is empty: give lengths as 256:256,1024:128"]})
    assert not BenchmarkSweep.objects.exists()
