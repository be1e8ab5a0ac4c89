"""Writes that outlast a transient "database is locked" (:mod:`controlplane.dbbusy`)."""
from __future__ import annotations

import pytest
from django.db import OperationalError

from controlplane.dbbusy import DatabaseBusy, busy_text, busy_timeout_s, retry_locked


def flaky(fails: int, error: str = "database is locked"):
    calls = {"n": 0}

    def write() -> str:
        calls["n"] += 1
        if calls["n"] <= fails:
            raise OperationalError(error)
        return "written"
    return write, calls


def test_it_tries_a_locked_write_again_with_backoff():
    write, calls = flaky(2)
    slept: list[float] = []
    assert retry_locked(write, what="writing a heartbeat", delays=(0.5, 1.0, 2.0), sleep=slept.append) == "written"
    assert calls["n"] == 3 and slept == [0.5, 1.0]


def test_it_gives_up_in_plain_words_when_the_lock_outlasts_every_attempt():
    write, calls = flaky(10)
    with pytest.raises(DatabaseBusy) as caught:
        retry_locked(write, what="writing a heartbeat", delays=(0.0, 0.0), sleep=lambda s: None)
    assert calls["n"] == 3
    assert str(caught.value).startswith("the database was busy (locked) for ")
    assert str(caught.value).endswith(" s while writing a heartbeat")
    assert "OperationalError" not in str(caught.value)


def test_it_raises_any_other_database_error_at_once():
    write, calls = flaky(1, error="no such table: x")
    with pytest.raises(OperationalError, match="no such table"):
        retry_locked(write, what="x", sleep=lambda s: None)
    assert calls["n"] == 1


def test_a_bare_locked_error_is_worded_with_the_busy_timeout():
    assert busy_text(OperationalError("database is locked"), what="point c=1 ran") == (
        f"the database was busy (locked) for more than {busy_timeout_s():.0f} s while point c=1 ran")
