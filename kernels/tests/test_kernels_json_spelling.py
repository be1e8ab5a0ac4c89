"""The kernel app's messages show a refused value in JSON's spelling (``true``, ``null``), never
Python's (``True``, ``None``); the job page shows its grid subset as JSON."""
from __future__ import annotations

import copy
import html

import pytest

from controlplane.errors import InvalidInput
from deployments.examples import example_recipes, seed_node_facts_example
from deployments.recipes import recipe_validate
from kernels.manifest import ManifestError, grid_subset_validate
from kernels.services import kernel_job_check, kernel_job_create, package_manifest


def test_a_grid_value_of_another_json_type_is_spelled_as_json(operator_api, toy_package, h200_node):
    answer = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "h200-box", "cc": "9.0",
                                                     "params": {"BLOCK": [True, None], "impl": False}}, format="json")

    assert answer.status_code == 400
    assert answer.json() == {
        "params.BLOCK": ["true is not one of the grid's values [16, 32, 64]",
                         "null is not one of the grid's values [16, 32, 64]"],
        "params.impl": ["must be a list of grid values (e.g. [false]), got the boolean false"],
    }


def test_a_batch_too_large_is_refused_at_its_item(operator_api, toy_package, h200_node):
    too_big = 2**70  # 1180591620717411303424
    answer = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "h200-box", "cc": "9.0",
                                                     "batches": [1, too_big, 1.5e-7]}, format="json")
    assert answer.status_code == 400
    assert answer.json() == {"batches.1": [f"must be between 1 and 2147483647, got {too_big}"],
                             "batches.2": ["must be an integer (e.g. 8), got the number 1.5e-7"]}


def test_a_subset_shape_or_batch_of_another_type_is_spelled_as_json(toy_package, h200_node):
    with pytest.raises(ManifestError) as err:
        grid_subset_validate(package_manifest(toy_package), True)
    assert err.value.errors == {"params": ["must be an object of parameter: [values], got the boolean true"]}

    errors = kernel_job_check(package=toy_package, node=h200_node, cc=None, shapes=[None], batches=[True])
    assert errors["shapes"] == ["null is not a shape of toy_attn (small, wide)"]
    assert errors["batches"] == ["true is not a batch size of the manifest ([1, 4])"]


def test_a_kernel_reference_of_another_type_is_spelled_as_json(toy_package):
    spec = copy.deepcopy(next(r for r in example_recipes() if r["name"] == "seed-v4-flash-pd"))["spec"]
    spec["kernels"] = [True, {"package": None, "config": "best:1", "best": None},
                       {"package": "toy_attn", "best": True}]

    with pytest.raises(InvalidInput) as err:
        recipe_validate(engine="sglang", topology="pd", spec=spec, node=seed_node_facts_example())

    assert err.value.errors["spec.kernels.0"] == ["must be an object {package, config}, got true"]
    assert err.value.errors["spec.kernels.1.package"] == [
        "null is not a registered kernel package (known: toy_attn)"]
    assert err.value.errors["spec.kernels.2.config"] == ["no best kernel variant with id true"]


def test_the_job_page_shows_its_grid_subset_as_json(client, viewer, toy_package, h200_node):
    job = kernel_job_create(package=toy_package, node=h200_node, params_subset={"impl": ["tiled"], "BLOCK": [32, 64]},
                            dispatch=False)
    client.force_login(viewer)

    page = client.get(f"/kernels/jobs/{job.pk}/").content.decode()

    assert html.escape('subset {"impl": ["tiled"], "BLOCK": [32, 64]}').replace("subset ", "subset <code>") in page
    assert "{&#x27;impl&#x27;" not in page


def test_a_grid_subset_of_the_wrong_type_names_it_as_a_sweep_grid_does(operator_api, toy_package, h200_node):
    from controlplane.api import shown_value

    answer = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "h200-box", "cc": "9.0",
                                                     "params": {"BLOCK": 32, "impl": {"a": 1}}}, format="json")
    assert answer.status_code == 400
    assert answer.json() == {"params.BLOCK": ["must be a list of grid values (e.g. [32]), got the number 32"],
                             "params.impl": ['must be a list of grid values (e.g. [{"a": 1}]), '
                                            'got the object {"a": 1}']}
    # a sweep grid's words for the same mistake
    from benchmarks.sweeps import grid_validate
    from controlplane.errors import InvalidInput

    with pytest.raises(InvalidInput) as err:
        grid_validate({"concurrency": 32, "lengths": [[64, 16]]})
    assert err.value.errors["grid.concurrency"] == ["must be a list of integers, got " + shown_value(32)]
