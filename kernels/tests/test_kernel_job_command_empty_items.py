"""``manage.py kernel_job`` refuses an empty item of ``--batches`` or ``--shapes`` (``1,,4``,
``small,``) with the API's message for one (:func:`controlplane.drf_defaults.empty_list_item`),
and names a batch that is no integer beside every other problem of the job (a bad ``--cc``)."""
from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from kernels.models import KernelJob

pytestmark = pytest.mark.django_db


def _kernel_job(*args: str) -> CommandError:
    with pytest.raises(CommandError) as err:
        call_command("kernel_job", "toy_attn", "--external", *args, stdout=io.StringIO(), stderr=io.StringIO())
    assert err.value.returncode == 2 and "\n" not in str(err.value)
    assert not KernelJob.objects.exists()
    return err.value


def test_the_kernel_job_command_refuses_an_empty_batch(toy_package):
    assert str(_kernel_job("--cc", "9.0", "--batches", "1,,4")) == (
        "the job was not created: batches: item 2 is empty: give batches as 1,8,64")
    assert str(_kernel_job("--cc", "9.0", "--shapes", "small,")) == (
        "the job was not created: shapes: item 2 is empty: give shapes as shape1,shape2")


def test_the_kernel_job_command_names_a_bad_cc_beside_bad_batches(toy_package):
    assert str(_kernel_job("--cc", "abc", "--batches", "x,,3")) == "the job was not created: " + "; ".join([
        "batches: item 2 is empty: give batches as 1,8,64",
        "batches: 'x' is not an integer: give batches as 1,8,64",
        "batches: 3 is not a batch size of the manifest ([1, 4])",
        "cc: 'abc' is not a compute capability such as 9.0 or 12.0"])
