"""Messages about a recipe show the value they refuse in JSON's spelling, as the body wrote it:
``got true``, ``got null``, ``got [1]``, never Python's ``True``, ``None`` or a type name such as
``list``; a text keeps its quotes (``got '30'``)."""
from __future__ import annotations

import pytest

from controlplane.errors import InvalidInput
from deployments.examples import example_recipe, local_node_facts_example, seed_node_facts_example
from deployments.nodes import node_register
from deployments.recipes import recipe_validate


def errors_of(spec: dict, *, engine: str = "sglang", topology: str = "pd") -> dict[str, list[str]]:
    with pytest.raises(InvalidInput) as info:
        recipe_validate(engine=engine, topology=topology, spec=spec, node=seed_node_facts_example())
    return info.value.errors


@pytest.mark.django_db
def test_a_boolean_stop_grace_is_told_in_jsons_spelling_by_the_api(operator_api):
    node_register(facts=local_node_facts_example(cpu_count=4))
    ex = example_recipe("local-sim-single")
    body = {"name": "grace", "engine": ex["engine"], "topology": ex["topology"], "node": ex["node"],
            "spec": {**ex["spec"], "stop_grace_s": True, "startup_timeout_s": None}}

    answer = operator_api.post("/api/recipes/", body, format="json")

    assert answer.status_code == 400
    assert answer.json() == {"spec.stop_grace_s": ["must be an integer, got true"],
                             "spec.startup_timeout_s": ["must be an integer, got null"]}


def test_values_of_every_json_type_are_spelled_as_json():
    spec = example_recipe("seed-v4-flash-pd")["spec"]
    spec["roles"]["prefill"]["gpus"] = [0, 1, True, None]
    spec["roles"]["prefill"]["port"] = False
    spec["roles"]["decode"]["flags"] = {"max-running-requests": True, "mem-fraction-static": {"a": None}}
    spec["env"] = {"SGLANG_X": None}
    spec["restart"] = {"policy": None}

    errs = errors_of(spec)

    assert errs["spec.roles.prefill.gpus"] == ["item 2 must be an integer GPU id, got true",
                                               "item 3 must be an integer GPU id, got null"]
    assert errs["spec.roles.prefill.port"] == ["must be an integer port, got false"]
    assert errs["spec.roles.decode.flags.max-running-requests"] == [
        "--max-running-requests must be an integer, got true"]
    assert errs["spec.roles.decode.flags.mem-fraction-static"] == [
        '--mem-fraction-static must be a number, got {"a": null}']
    assert errs["spec.env.SGLANG_X"] == ["value must be a string, got null"]
    assert errs["spec.restart.policy"] == ["must be never or on-failure, got null"]


def test_a_role_or_spec_that_is_not_an_object_is_shown_not_named_by_its_python_type():
    spec = example_recipe("seed-v4-flash-pd")["spec"]
    spec["roles"]["prefill"] = [1, True]

    assert errors_of(spec)["spec.roles.prefill"] == ["must be an object, got [1, true]"]
    assert errors_of(None)["spec"] == ["must be an object, got null"]
