"""A kernel job body naming no registered package and no node still has its ``cc`` judged: every
problem in one 400."""
from __future__ import annotations

import pytest

from kernels.models import KernelJob

pytestmark = pytest.mark.django_db


def test_an_unknown_package_does_not_hide_a_bad_cc(operator_api):
    body = operator_api.post("/api/kernel-jobs/", {"package": "nope", "node": "nope", "cc": "x"}, format="json")
    assert body.status_code == 400
    assert body.json() == {"package": ["no registered kernel package named 'nope'"], "node": ["no node named 'nope'"],
                           "cc": ["'x' is not a compute capability such as 9.0 or 12.0"]}
    unknown = operator_api.post("/api/kernel-jobs/", {"package": "nope", "cc": "4.2"}, format="json").json()
    assert unknown["cc"][0].startswith("'4.2' is not a known compute capability")
    assert not KernelJob.objects.exists()
