"""The kernel job form refuses an empty item of its comma-separated batches and grid-subset values
(``1,,4``, ``1,4,``, ``BLOCK=32,,64``) with the API's message for one
(:func:`controlplane.drf_defaults.empty_list_item`), under the field, the typed values kept;
nothing is created."""
from __future__ import annotations

import html

import pytest
from django.test import Client

from controlplane.drf_defaults import empty_list_item
from kernels.models import KernelJob

pytestmark = pytest.mark.django_db

URL = "/kernels/packages/toy_attn/jobs/new/"


def _post(operator, **fields):
    c = Client()
    c.force_login(operator)
    resp = c.post(URL, {"node": "h200-box", "cc": "9.0", "shapes": ["small"], **fields})
    return resp, html.unescape(resp.content.decode())


@pytest.mark.parametrize("typed,index", [("1,,4", 2), ("1,4,", 3), (",1", 1), ("1, ,4", 2)])
def test_an_empty_batch_item_is_refused_at_the_field(operator, toy_package, h200_node, typed, index):
    resp, page = _post(operator, batches=typed)
    assert resp.status_code == 400 and not KernelJob.objects.exists()
    assert resp.context["errors"]["batches"] == [empty_list_item(index, "batches", "1,8,64")]
    assert f"item {index} is empty: give batches as 1,8,64" in page
    assert f'name="batches" value="{typed}"' in page  # kept as typed


def test_an_empty_value_of_a_grid_parameter_is_refused_at_the_field(operator, toy_package, h200_node):
    typed = "impl=tiled; BLOCK=32,,64"
    resp, page = _post(operator, params=typed, batches="1,4")
    assert resp.status_code == 400 and not KernelJob.objects.exists()
    assert resp.context["errors"]["params"] == ["item 2 is empty: give BLOCK as 32,64"]
    assert f'name="params" value="{typed}"' in page and 'name="batches" value="1,4"' in page


def test_the_same_lists_without_an_empty_item_start_the_job(operator, toy_package, h200_node,
                                                            django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        resp, _ = _post(operator, params="impl=tiled; BLOCK=32, 64;", batches=" 1, 4 ")
    assert resp.status_code == 302
    job = KernelJob.objects.get()
    assert job.params_subset == {"impl": ["tiled"], "BLOCK": [32, 64]} and job.batches == [1, 4]
