"""``manage.py kernel_job --params JSON`` refuses a key given more than once (``{"impl":
["tiled"], "impl": ["baseline"]}``) as a JSON API body does, where Python's ``json`` would take
the last: a ``CommandError`` naming ``params.impl`` (``is given 2 times (["tiled"], ["baseline"]):
give it once``) beside every other problem of the job, on one line with exit status 2, and no job
is created. Every other refusal of the command's input is one line and exit status 2 too."""
from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from kernels.models import KernelJob

pytestmark = pytest.mark.django_db


def kernel_job(*args: str) -> str:
    out = io.StringIO()
    call_command("kernel_job", "toy_attn", "--external", "--cc", "9.0", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_a_param_given_twice_is_refused_and_no_job_is_created(toy_package):
    with pytest.raises(CommandError) as err:
        kernel_job("--params", '{"impl": ["tiled"], "impl": ["baseline"]}')

    assert str(err.value) == ('the job was not created: '
                              'params.impl: is given 2 times (["tiled"], ["baseline"]): give it once')
    assert err.value.returncode == 2
    assert not KernelJob.objects.exists()


def test_a_param_given_twice_is_named_beside_every_other_problem(toy_package):
    with pytest.raises(CommandError) as err:
        kernel_job("--params", '{"impl": ["tiled"], "BLOCK": [48], "impl": ["baseline"]}',
                   "--shapes", "small,zzz", "--batches", "1,3")

    assert str(err.value) == "the job was not created: " + "; ".join([
        'params.impl: is given 2 times (["tiled"], ["baseline"]): give it once',
        "shapes: 'zzz' is not a shape of toy_attn (small, wide)",
        "batches: 3 is not a batch size of the manifest ([1, 4])",
        "params.BLOCK: 48 is not one of the grid's values [16, 32, 64]",
    ]) and err.value.returncode == 2
    assert not KernelJob.objects.exists()


def test_a_key_given_twice_inside_a_param_s_values_is_named_at_its_path(toy_package):
    with pytest.raises(CommandError) as err:
        kernel_job("--params", '{"impl": [{"x": 1, "x": 2}], "BLOCK": [32]}')

    assert str(err.value) == ("the job was not created: "
                              "params.impl.0.x: is given 2 times (1, 2): give it once")
    assert not KernelJob.objects.exists()


def test_each_param_once_still_creates_the_job(toy_package):
    out = kernel_job("--params", '{"impl": ["tiled"], "BLOCK": [32]}')

    job = KernelJob.objects.get()
    assert job.params_subset == {"impl": ["tiled"], "BLOCK": [32]}
    assert out.startswith(f"kernel job #{job.pk}: toy_attn, {job.variants_total} variants")
    assert {v.params["impl"] for v in job.variants.all()} == {"tiled"}


def test_a_job_the_service_refuses_lists_its_problems_the_same_way(toy_package):
    with pytest.raises(CommandError) as err:
        kernel_job("--params", '{"BLOCK": [48]}', "--batches", "3")

    assert str(err.value) == ("the job was not created: batches: 3 is not a batch size of the manifest ([1, 4]); "
                              "params.BLOCK: 48 is not one of the grid's values [16, 32, 64]")
    assert err.value.returncode == 2
    assert not KernelJob.objects.exists()


def test_a_batch_or_shape_listed_twice_is_refused_with_the_apis_message(toy_package, operator_api):
    with pytest.raises(CommandError) as err:
        kernel_job("--batches", "1,1", "--shapes", "small,wide,small,small", "--params", '{"BLOCK": [48]}')

    assert str(err.value) == "the job was not created: " + "; ".join([
        "shapes: shape 'small' is given 3 times: give each once",
        "batches: batch 1 is given twice: give each once",
        "params.BLOCK: 48 is not one of the grid's values [16, 32, 64]",
    ])
    assert not KernelJob.objects.exists()
    api = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "cc": "9.0", "batches": [1, 1]},
                            format="json")
    assert api.status_code == 400 and api.json()["batches"] == ["batch 1 is given twice: give each once"]
    kernel_job("--batches", "1,4")
    assert KernelJob.objects.get().batches == [1, 4]


@pytest.mark.parametrize("given,line", [
    ('{"BLOCK": [1e400]}', "the job was not created: params.BLOCK.0: 1e400 is not a finite number"),
    ('{"BLOCK": [32, NaN], "impl": [-Infinity]}',
     "the job was not created: params.BLOCK.1: NaN is not a finite number; "
     "params.impl.0: -Infinity is not a finite number"),
])
def test_a_number_that_is_not_finite_is_refused_on_one_line_with_the_apis_message(toy_package, operator_api,
                                                                                  given, line):
    with pytest.raises(CommandError) as err:
        kernel_job("--params", given)
    assert str(err.value) == line and err.value.returncode == 2
    assert not KernelJob.objects.exists()
    api = operator_api.generic("POST", "/api/kernel-jobs/", '{"package": "toy_attn", "cc": "9.0", "params": %s}' % given,
                               content_type="application/json").json()
    for part in line.removeprefix("the job was not created: ").split("; "):
        path, message = part.split(": ", 1)
        assert api[path] == [message]


@pytest.mark.parametrize("args,line", [
    (["--params", "{nope"], "the job was not created: --params is not JSON: "),
    (["--batches", "1,x"], "the job was not created: batches: 'x' is not an integer: give batches as 1,8,64"),
    (["--user", "nobody"], "the job was not created: --user 'nobody': no such user"),
    (["--wait", "nan"], "the job was not created: --wait must be a finite number of seconds >= 0, got NaN"),
])
def test_every_refusal_of_the_input_is_one_line_with_exit_status_2(toy_package, args, line):
    with pytest.raises(CommandError) as err:
        kernel_job(*args)
    assert str(err.value).startswith(line) and "\n" not in str(err.value) and err.value.returncode == 2
    assert not KernelJob.objects.exists()


@pytest.mark.parametrize("args,line", [
    (["no_such_package", "--external"],
     "the job was not created: package: no registered kernel package named 'no_such_package' (run kernel_register)"),
    (["toy_attn", "--node", "nowhere"], "the job was not created: node: no node named 'nowhere'"),
])
def test_an_unknown_package_or_node_is_one_line_with_exit_status_2(toy_package, args, line):
    with pytest.raises(CommandError) as err:
        call_command("kernel_job", *args, stdout=io.StringIO(), stderr=io.StringIO())
    assert str(err.value) == line and err.value.returncode == 2


@pytest.mark.parametrize("params,line", [
    ('{"BLOCK": [Infinity]}', "the job was not created: params.BLOCK.0: Infinity is not a finite number"),
    ('{"BLOCK": [16], "BLOCK": [32]}', "the job was not created: params.BLOCK: is given 2 times ([16], [32]): give it once"),
])
def test_the_command_line_exits_2_with_one_line_for_a_refused_params(transactional_db, toy_package, params, line):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from deployments.tests.test_agent_support import database_url

    env = {**os.environ, "DATABASE_URL": database_url(), "DJANGO_SETTINGS_MODULE": "controlplane.settings"}
    done = subprocess.run([sys.executable, "manage.py", "kernel_job", "toy_attn", "--external", "--cc", "9.0", "--params",
                           params], cwd=Path(__file__).resolve().parents[2], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"CommandError: {line}"]
    assert done.stdout == "" and not KernelJob.objects.exists()
