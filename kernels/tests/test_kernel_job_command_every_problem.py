"""``manage.py kernel_job`` checks all of its input before it refuses, as ``POST /api/kernel-jobs/``
does: an unknown package does not hide an unknown node, a bad ``--cc``, a number in ``--params``
that is not finite or a bad ``--batches`` item; each problem is named at its path with the API's
message, on the one line of the refusal, exit status 2, and nothing is created."""
from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from kernels.models import KernelJob

pytestmark = pytest.mark.django_db


def refusal(*args: str) -> CommandError:
    with pytest.raises(CommandError) as err:
        call_command("kernel_job", *args, stdout=io.StringIO(), stderr=io.StringIO())
    assert err.value.returncode == 2 and "\n" not in str(err.value)
    assert not KernelJob.objects.exists()
    return err.value


def test_an_unknown_package_and_an_unknown_node_are_both_named(toy_package, operator_api):
    err = refusal("nope", "--node", "ghost")

    assert str(err) == ("the job was not created: package: no registered kernel package named 'nope' "
                        "(run kernel_register); node: no node named 'ghost'")
    api = operator_api.post("/api/kernel-jobs/", {"package": "nope", "node": "ghost"}, format="json")
    assert api.status_code == 400
    assert api.json() == {"package": ["no registered kernel package named 'nope'"], "node": ["no node named 'ghost'"]}


def test_an_unknown_package_does_not_hide_a_bad_cc_params_or_batches(toy_package):
    err = refusal("nope", "--node", "ghost", "--cc", "9", "--params", '{"BLOCK": [1e400]}', "--batches", "1,x")

    assert str(err) == "the job was not created: " + "; ".join([
        "package: no registered kernel package named 'nope' (run kernel_register)",
        "node: no node named 'ghost'",
        "cc: '9' is not a compute capability such as 9.0 or 12.0",
        "params.BLOCK.0: 1e400 is not a finite number",
        "batches: 'x' is not an integer: give batches as 1,8,64",
    ])


def test_an_unknown_node_does_not_hide_the_packages_own_problems(toy_package):
    err = refusal("toy_attn", "--node", "ghost", "--shapes", "small,zzz", "--batches", "3")

    assert str(err) == "the job was not created: " + "; ".join([
        "node: no node named 'ghost'",
        "shapes: 'zzz' is not a shape of toy_attn (small, wide)",
        "batches: 3 is not a batch size of the manifest ([1, 4])",
    ])


def test_a_number_that_is_not_finite_does_not_hide_the_other_params(toy_package):
    err = refusal("toy_attn", "--external", "--cc", "9.0", "--params", '{"BLOCK": [NaN], "impl": ["nope"]}')

    assert str(err) == ("the job was not created: params.BLOCK.0: NaN is not a finite number; "
                        "params.impl: 'nope' is not one of the grid's values [\"baseline\", \"tiled\"]")


def test_a_bad_user_wait_or_params_is_named_with_every_other_problem(toy_package, viewer):
    """A bad ``--user``, a ``--wait`` that is no finite number of seconds >= 0 and ``--params``
    that is not JSON no longer stop the command before the rest is checked: they lead the one
    line, then the other problems at their paths."""
    err = refusal("nope", "--node", "ghost", "--user", "vera-viewer", "--wait", "-1", "--params", "{nope",
                  "--batches", "1,x")

    assert str(err) == "the job was not created: " + "; ".join([
        "--user 'vera-viewer': has the viewer role; creating a kernel job needs operator or admin",
        "--wait must be a finite number of seconds >= 0, got -1",
        "--params is not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        "package: no registered kernel package named 'nope' (run kernel_register)",
        "node: no node named 'ghost'",
        "batches: 'x' is not an integer: give batches as 1,8,64",
    ])


def test_a_bad_user_and_wait_beside_a_job_the_package_refuses(toy_package):
    err = refusal("toy_attn", "--external", "--cc", "9.0", "--user", "ghost", "--wait", "nan", "--batches", "3")

    assert str(err) == "the job was not created: " + "; ".join([
        "--user 'ghost': no such user",
        "--wait must be a finite number of seconds >= 0, got NaN",
        "batches: 3 is not a batch size of the manifest ([1, 4])",
    ])
