"""Every top-level field of ``POST /api/kernel-jobs/`` refuses a value of the wrong JSON type (and
null) in the API's words, naming what it takes and the value given (``must be an object (e.g.
...), got the number 1``), never REST framework's ``Expected a dictionary of items but got type
"int".`` or ``This field may not be null.``; nothing is created."""
from __future__ import annotations

import pytest

from kernels.models import KernelJob

pytestmark = pytest.mark.django_db

TAKES = {
    "package": 'must be a string (e.g. "sparse_mla_decode")',
    "node": 'must be a string (e.g. "local")',
    "cc": 'must be a string (e.g. "9.0")',
    "params": 'must be an object (e.g. {"impl": ["split_k"]})',
    "shapes": 'must be a list of shape names (e.g. ["v4-flash"])',
    "batches": "must be a list of integers (e.g. [1, 8])",
}

# a value of another JSON type than the field's, as the message names it
WRONG = {
    "package": [(1, "the number 1"), (["toy_attn"], 'the list ["toy_attn"]'), ({"a": 1}, 'the object {"a": 1}'),
                (None, "null")],
    "node": [(1, "the number 1"), (["cpu-box"], 'the list ["cpu-box"]'), (True, "the boolean true"), (None, "null")],
    "cc": [(9.0, "the number 9"), (["9.0"], 'the list ["9.0"]'), ({"a": 1}, 'the object {"a": 1}'), (None, "null")],
    "params": [(1, "the number 1"), ([1], "the list [1]"), ("impl", 'the string "impl"'), (True, "the boolean true"),
               (None, "null")],
    "shapes": [(1, "the number 1"), ("small", 'the string "small"'), ({"a": 1}, 'the object {"a": 1}'),
               (None, "null")],
    "batches": [(1, "the number 1"), ("1,4", 'the string "1,4"'), ({"a": 1}, 'the object {"a": 1}'),
                (1.5, "the number 1.5"), (None, "null")],
}


@pytest.mark.parametrize("field,value,shown", [(f, v, s) for f, cases in WRONG.items() for v, s in cases])
def test_a_value_of_the_wrong_type_is_named_in_the_apis_words(operator_api, toy_package, cpu_node, field, value,
                                                               shown):
    body = {"package": "toy_attn", "node": "cpu-box", "cc": "9.0", field: value}
    answer = operator_api.post("/api/kernel-jobs/", body, format="json")
    assert answer.status_code == 400
    assert answer.json() == {field: [f"{TAKES[field]}, got {shown}"]}
    assert not KernelJob.objects.exists()


def test_a_form_bodys_params_text_that_is_not_an_object_is_named_too(operator_api, toy_package, cpu_node):
    answer = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "cpu-box", "cc": "9.0",
                                                     "params": "[1]"})  # multipart, as a form sends it
    assert answer.status_code == 400
    assert answer.json() == {"params": [f"{TAKES['params']}, got the list [1]"]}
