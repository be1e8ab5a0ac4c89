"""A number that is not finite in ``params`` of ``POST /api/kernel-jobs/`` (``1e400``, ``NaN``,
``Infinity``, at any depth) is named at its own path alone (``{"params.BLOCK.0": ["1e400 is not a
finite number"]}``), never also as REST framework's ``Value must be valid JSON.`` at the
parameter's key; a form body's ``params`` JSON text is judged the same way. Nothing is created."""
from __future__ import annotations

import pytest

from kernels.models import KernelJob

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("params,errors", [
    ('{"BLOCK": [1e400]}', {"params.BLOCK.0": ["1e400 is not a finite number"]}),
    ('{"BLOCK": [NaN]}', {"params.BLOCK.0": ["NaN is not a finite number"]}),
    ('{"BLOCK": [32, -Infinity]}', {"params.BLOCK.1": ["-Infinity is not a finite number"]}),
    ('{"BLOCK": 1e400}', {"params.BLOCK": ["1e400 is not a finite number"]}),
    ('{"impl": [{"x": [1e400]}]}', {"params.impl.0.x.0": ["1e400 is not a finite number"]}),
    ('{"BLOCK": [1e400], "impl": [NaN]}', {"params.BLOCK.0": ["1e400 is not a finite number"],
                                           "params.impl.0": ["NaN is not a finite number"]}),
])
def test_a_number_that_is_not_finite_is_named_at_its_path_alone(operator_api, toy_package, cpu_node, params, errors):
    body = '{"package": "toy_attn", "node": "cpu-box", "cc": "9.0", "params": %s}' % params
    answer = operator_api.generic("POST", "/api/kernel-jobs/", body, content_type="application/json")

    assert answer.status_code == 400
    assert answer.json() == errors
    assert not KernelJob.objects.exists()


def test_it_is_named_beside_the_bodys_other_problems(operator_api, toy_package, cpu_node):
    body = '{"package": "toy_attn", "node": "cpu-box", "cc": "9.0", "params": {"BLOCK": [1e400]}, "batches": [1, 1]}'
    answer = operator_api.generic("POST", "/api/kernel-jobs/", body, content_type="application/json")

    assert answer.status_code == 400
    assert answer.json() == {"params.BLOCK.0": ["1e400 is not a finite number"],
                             "batches": ["batch 1 is given twice: give each once"]}


@pytest.mark.parametrize("params,errors", [
    ('{"BLOCK": [1e400]}', {"params.BLOCK.0": ["1e400 is not a finite number"]}),
    ('{"BLOCK": [NaN]}', {"params.BLOCK.0": ["NaN is not a finite number"]}),
    ('{"BLOCK": Infinity}', {"params.BLOCK": ["Infinity is not a finite number"]}),
])
def test_a_form_bodys_params_text_is_judged_the_same_way(operator_api, toy_package, cpu_node, params, errors):
    answer = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "cpu-box", "cc": "9.0",
                                                     "params": params})  # multipart, as a form sends it

    assert answer.status_code == 400
    assert answer.json() == errors
    assert not KernelJob.objects.exists()


def test_finite_params_still_create_the_job(operator_api, toy_package, cpu_node):
    answer = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "cpu-box", "cc": "9.0",
                                                     "params": {"BLOCK": [32], "impl": ["tiled"]}}, format="json")

    assert answer.status_code == 201, answer.json()
    assert KernelJob.objects.get().params_subset == {"BLOCK": [32], "impl": ["tiled"]}
