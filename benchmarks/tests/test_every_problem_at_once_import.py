"""A result import whose ``allow_duplicate`` is refused still has its pasted text judged: every
problem of the body in one 400."""
from __future__ import annotations

import pytest

from benchmarks.models import BenchmarkRun

pytestmark = pytest.mark.django_db


def test_a_bad_allow_duplicate_does_not_hide_the_texts_problems(operator_api):
    bad = operator_api.post("/api/runs/import/", {"text": "{}", "allow_duplicate": "yes"}, format="json")
    alone = operator_api.post("/api/runs/import/", {"text": "{}"}, format="json")
    assert bad.status_code == 400 and alone.status_code == 400
    body, text_only = bad.json(), alone.json()
    assert "allow_duplicate" in body
    assert {k: v for k, v in body.items() if k != "allow_duplicate"} == text_only, body
    assert not BenchmarkRun.objects.exists()
