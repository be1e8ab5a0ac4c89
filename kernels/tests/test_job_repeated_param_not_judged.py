"""A kernel job body whose ``params`` gives a key twice: that key is named once, with the message
of a key given twice, and neither of its values is judged against the grid (no second message
about a value the client may not have meant); the other parameters and fields are still judged."""
from __future__ import annotations

import pytest

from kernels.models import KernelJob

pytestmark = pytest.mark.django_db


def _post(api, params_json: str, extra: str = ""):
    body = '{"package": "toy_attn", "node": "h200-box", "cc": "9.0", "params": %s%s}' % (params_json, extra)
    return api.post("/api/kernel-jobs/", body, content_type="application/json")


def test_a_param_given_twice_is_named_alone_and_its_values_not_judged(operator_api, toy_package, h200_node):
    answer = _post(operator_api, '{"impl": ["tiled"], "impl": ["no-such-impl"]}')
    assert answer.status_code == 400
    assert answer.json() == {"params.impl": ['is given 2 times (["tiled"], ["no-such-impl"]): give it once']}
    assert not KernelJob.objects.exists()


def test_the_other_params_and_fields_are_still_judged(operator_api, toy_package, h200_node):
    answer = _post(operator_api, '{"impl": ["zzz"], "BLOCK": [48], "impl": ["yyy"]}', ', "batches": [3]')
    assert answer.status_code == 400
    assert answer.json() == {
        "params.impl": ['is given 2 times (["zzz"], ["yyy"]): give it once'],
        "params.BLOCK": ["48 is not one of the grid's values [16, 32, 64]"],
        "batches": ["3 is not a batch size of the manifest ([1, 4])"],
    }
    assert not KernelJob.objects.exists()
