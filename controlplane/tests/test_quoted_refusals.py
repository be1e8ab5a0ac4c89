"""A 400 of a query parameter or a body field quotes the refused value, as the rest of the API
does (``got the string "8"``): the shared query field (``IdField``), the strict integer and
primary-key fields of bodies, and the what-if's number field say what they got, not DRF's
"A valid integer is required." or "Ensure this value ..."."""
from __future__ import annotations

import pytest

from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = pytest.mark.django_db

WHOLE = "must be a whole number between {} and {}, got '{}'"


@pytest.fixture
def rows() -> dict:
    recipe = recipe_row_create(node=cpu_node_create())
    process = deployment_row_create(recipe=recipe).processes.get()
    return {"recipe": recipe.pk, "process": process.pk}


@pytest.mark.parametrize("raw", ["abc", "-1", "0", "2001", "1.5"])
def test_a_log_tail_quotes_the_line_count_it_refuses(viewer_api, rows, raw):
    answer = viewer_api.get(f"/api/processes/{rows['process']}/log/", {"lines": raw})
    assert answer.status_code == 400
    assert answer.json() == {"lines": [WHOLE.format(1, 2000, raw)]}


def test_kernel_queries_quote_the_value_they_refuse(viewer_api):
    assert viewer_api.get("/api/kernel-best/?batch=abc").json() == {"batch": [WHOLE.format(1, 2147483647, "abc")]}
    assert viewer_api.get("/api/kernel-whatif/?sweep=abc&speedup=3").json() == {
        "sweep": [WHOLE.format(1, 2147483647, "abc")]}
    for raw in ("1e400", "NaN", "-inf"):
        answer = viewer_api.get("/api/kernel-whatif/", {"sweep": 2, "speedup": raw})
        assert answer.status_code == 400
        assert answer.json() == {"speedup": [f"'{raw}' is not a finite number"]}
    assert viewer_api.get("/api/kernel-whatif/?sweep=2&speedup=fast").json() == {"speedup": ["'fast' is not a number"]}


def test_body_integers_quote_the_value_out_of_range_or_naming_no_row(operator_api, rows):
    revert = operator_api.post(f"/api/recipes/{rows['recipe']}/revert/", {"version": 0}, format="json")
    assert revert.status_code == 400
    assert revert.json() == {"version": ["must be between 1 and 2147483647, got 0"]}
    for pk in (99999999999999999999, 424242):
        deploy = operator_api.post("/api/deployments/", {"recipe": pk}, format="json")
        assert deploy.status_code == 400
        assert deploy.json() == {"recipe": [f"must be the id of an existing recipe, got {pk}"]}


def test_a_body_integer_of_hundreds_of_digits_is_quoted_by_its_first_39(operator_api, rows):
    huge = 10 ** 400
    revert = operator_api.post(f"/api/recipes/{rows['recipe']}/revert/", {"version": huge}, format="json")
    assert revert.status_code == 400
    assert revert.json() == {"version": [f"must be between 1 and 2147483647, got {str(huge)[:39]}…"]}
    deploy = operator_api.post("/api/deployments/", {"recipe": huge}, format="json")
    assert deploy.json() == {"recipe": [f"must be the id of an existing recipe, got {str(huge)[:39]}…"]}
