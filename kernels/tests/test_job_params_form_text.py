"""A kernel job sent as a form body may give ``params`` as JSON text in the field itself; DRF read
only ``params.<key>`` fields there and silently took the whole grid instead. The text is read as a
JSON body is (a key given twice inside it is named), and a ``params.<key>`` field is an unknown field, as before."""
from __future__ import annotations

import pytest

from kernels.models import KernelJob

pytestmark = pytest.mark.django_db

FORM = {"package": "toy_attn", "node": "h200-box", "cc": "9.0"}


def test_params_as_json_text_in_a_form_field_choose_the_subset(operator_api, toy_package, h200_node):
    answer = operator_api.post("/api/kernel-jobs/", {**FORM, "params": '{"impl": ["tiled"], "BLOCK": [32]}'})
    assert answer.status_code == 201, answer.json()
    job = KernelJob.objects.get()
    assert job.params_subset == {"impl": ["tiled"], "BLOCK": [32]}


def test_a_key_given_twice_inside_the_text_is_named(operator_api, toy_package, h200_node):
    answer = operator_api.post("/api/kernel-jobs/", {**FORM, "params": '{"impl": ["tiled"], "impl": ["baseline"]}'})
    assert answer.status_code == 400
    assert answer.json() == {"params.impl": ['is given 2 times (["tiled"], ["baseline"]): give it once']}
    assert not KernelJob.objects.exists()


def test_text_that_is_not_an_object_or_not_json_is_refused(operator_api, toy_package, h200_node):
    answer = operator_api.post("/api/kernel-jobs/", {**FORM, "params": '["tiled"]'})
    assert answer.status_code == 400 and list(answer.json()) == ["params"]
    assert answer.json()["params"] == ['must be an object (e.g. {"impl": ["split_k"]}), got the list ["tiled"]']
    answer = operator_api.post("/api/kernel-jobs/", {**FORM, "params": "{impl: tiled}"})
    assert answer.json() == {"params": ["Value must be valid JSON."]}
    assert not KernelJob.objects.exists()


def test_a_prefixed_key_beside_the_text_is_an_unknown_field(operator_api, toy_package, h200_node):
    answer = operator_api.post("/api/kernel-jobs/", {**FORM, "params": '{"impl": ["tiled"]}', "params.BLOCK": "[32]"})
    assert answer.status_code == 400
    assert answer.json() == {"params.BLOCK": [
        "unknown field 'params.BLOCK'; allowed: package, node, cc, params, shapes, batches"]}
    assert not KernelJob.objects.exists()
