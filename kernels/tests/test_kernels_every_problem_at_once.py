"""A kernel job body and a recipe's kernel references are answered with every problem at once, as
the README promises: a shape or batch given twice does not hide an unknown shape, a bad batch does
not hide a repeated one, and an unknown package does not hide a bad config or role of the same
reference."""
from __future__ import annotations

import copy

import pytest

from controlplane.errors import InvalidInput
from deployments.examples import example_recipes, seed_node_facts_example
from deployments.recipes import recipe_validate
from kernels.models import KernelJob


def job_post(api, **body):
    return api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "h200-box", "cc": "9.0", **body},
                    format="json")


def test_a_job_body_names_unknown_and_repeated_shapes_and_bad_and_repeated_batches_together(
        operator_api, toy_package, h200_node):
    answer = job_post(operator_api, shapes=["nope", "wide", "wide"], batches=[1, 1, -5])

    assert answer.status_code == 400, answer.content
    assert answer.json() == {
        "shapes": ["shape 'wide' is given twice: give each once", "'nope' is not a shape of toy_attn (small, wide)"],
        "batches": ["batch 1 is given twice: give each once"],
        "batches.2": ["must be between 1 and 2147483647, got -5"],
    }
    assert not KernelJob.objects.exists()


def test_the_batches_that_parse_are_checked_against_the_package_beside_one_that_does_not(
        operator_api, toy_package, h200_node):
    answer = job_post(operator_api, shapes=["small", 7], batches=[3, "4", 3])

    assert answer.status_code == 400, answer.content
    assert answer.json() == {
        "shapes.1": ["must be a string (e.g. \"v4-flash\"), got the number 7"],
        "batches": ["batch 3 is given twice: give each once", "3 is not a batch size of the manifest ([1, 4])"],
        "batches.1": ['must be an integer (e.g. 8), got the string "4"'],
    }


def test_a_value_given_three_times_is_named_once_with_its_count(operator_api, toy_package, h200_node):
    answer = job_post(operator_api, shapes=["wide", "wide", "wide", "small", "small"])

    assert answer.json() == {"shapes": ["shape 'wide' is given 3 times: give each once",
                                        "shape 'small' is given twice: give each once"]}


def _seed_pd_spec() -> dict:
    return copy.deepcopy(next(r for r in example_recipes() if r["name"] == "seed-v4-flash-pd"))["spec"]


def _errors(ref) -> dict:
    spec = _seed_pd_spec()
    spec["kernels"] = [ref]
    with pytest.raises(InvalidInput) as err:
        recipe_validate(engine="sglang", topology="pd", spec=spec, node=seed_node_facts_example())
    return err.value.errors


def test_an_unknown_package_does_not_hide_the_references_config(toy_package):
    errors = _errors({"package": "nope", "config": True})

    assert errors == {
        "spec.kernels.0.package": ["'nope' is not a registered kernel package (known: toy_attn)"],
        "spec.kernels.0.config": ["give the exported config's path or a best-variant id (an integer or "
                                  "'best:<id>'), got true"],
    }


def test_an_unknown_package_does_not_hide_a_bad_path_or_role(toy_package):
    errors = _errors({"package": "nope", "config": "relative.json", "roles": ["router", "decode"]})

    assert errors == {
        "spec.kernels.0.package": ["'nope' is not a registered kernel package (known: toy_attn)"],
        "spec.kernels.0.config": ["'relative.json' must be an absolute path"],
        "spec.kernels.0.roles": ["'router' is not a worker role of this recipe (prefill, decode)"],
    }


def test_a_bad_best_id_does_not_hide_the_references_roles(toy_package):
    errors = _errors({"package": "toy_attn", "config": "best:abc", "roles": "decode"})

    assert errors == {
        "spec.kernels.0.config": ["'best:abc': 'best:<id>' needs a best-variant id, an integer"],
        "spec.kernels.0.roles": ["must be a non-empty list of worker roles (prefill, decode)"],
    }


SORT_KEYS = ("ordinal, key, registers, spills_bytes, shared_bytes, build_s, tensor_core, param:impl, param:BLOCK, "
             "param:num_warps, us:small, roof:small, us:wide, roof:wide ('-' in front: descending)")


@pytest.mark.parametrize("query, body", [
    ("state=zz&sort=bad", {"state": ["must be one of all, built, failed, discarded, correct, wrong, timed; got 'zz'"],
                           "sort": [f"'bad' is not a sort key; keys: {SORT_KEYS}"]}),
    ("limit=0&p.x=1", {"limit": ["must be a whole number between 1 and 2000, got '0'"],
                       "p.x": ["not a parameter of this job; parameters: impl, BLOCK, num_warps "
                               "(filter as p.<parameter>=<value>)"]}),
    ("format=xml&batch=99", {"format": ["must be one of json, csv; got 'xml'"],
                             "batch": ["99 is not a batch of this job; batches: 1, 4"]}),
])
def test_the_variant_table_names_the_jobs_refusals_beside_the_querys_own(viewer_api, measured_job, query, body):
    # the table's sort keys, parameters and batches depend on the job: judged with the query's values
    answer = viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/variants/?{query}")
    assert answer.status_code == 400, answer.content
    assert answer.json() == body


def test_the_chart_names_a_shape_of_another_job_and_an_unknown_key_together(viewer_api, measured_job):
    answer = viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/chart/?shape=huge&batch=1")
    assert answer.status_code == 400, answer.content
    assert answer.json() == {"shape": ["'huge' is not a shape of this job (its shapes: small, wide)"],
                             "batch": ["unknown field 'batch'; allowed: shape, format"]}
    empty = viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/chart/?shape=&batch=1").json()
    assert empty == {"shape": ["query parameter 'shape' is empty: give a value or leave it out"],
                     "batch": ["unknown field 'batch'; allowed: shape, format"]}
    assert viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/chart/?shape=small").status_code == 200
