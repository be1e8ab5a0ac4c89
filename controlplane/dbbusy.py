"""Writes that outlast a transient "database is locked" from the embedded SQLite database.

SQLite allows one writer at a time; a writer that waits longer than the connection's busy timeout
(``OPTIONS["timeout"]``, 20 s) gets ``OperationalError: database is locked``. A heartbeat or
progress write that meets it is worth trying again a little later rather than failing what it
belongs to: :func:`retry_locked` does, with backoff, and raises :class:`DatabaseBusy` (worded for a
person: "the database was busy (locked) for 47 s while ...") when the lock outlasts every attempt.
PostgreSQL never raises this error, so there it is one plain call.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from django.db import OperationalError, connection

log = logging.getLogger(__name__)

T = TypeVar("T")

# Seconds slept before each further attempt (4 more after the first). Each attempt itself waits up
# to the busy timeout, so a lock is outlasted for about 4 x 20 s + 7.5 s before the write gives up.
LOCKED_RETRY_DELAYS_S: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)


class DatabaseBusy(Exception):
    """A write gave up because the database stayed locked: ``what`` (the words after "while")
    and ``seconds`` (from the first attempt to the last failure)."""

    def __init__(self, what: str, seconds: float) -> None:
        self.what, self.seconds = what, seconds
        super().__init__(f"the database was busy (locked) for {seconds:.0f} s while {what}")


def is_locked(exc: BaseException) -> bool:
    """True for SQLite's "database is locked" (or "database table is locked") error."""
    return isinstance(exc, OperationalError) and "is locked" in str(exc)


def busy_timeout_s() -> float:
    """The default connection's busy timeout in seconds (SQLite's default 5 s where unset)."""
    return float(connection.settings_dict.get("OPTIONS", {}).get("timeout", 5))


def busy_text(exc: BaseException, *, what: str) -> str:
    """A locked-database error in plain words: :class:`DatabaseBusy` as it is, a bare
    "database is locked" as busy for at least the busy timeout while ``what``."""
    if isinstance(exc, DatabaseBusy):
        return str(exc)
    return f"the database was busy (locked) for more than {busy_timeout_s():.0f} s while {what}"


def retry_locked(write: Callable[[], T], *, what: str, delays: Sequence[float] = LOCKED_RETRY_DELAYS_S,
                 sleep: Callable[[float], None] = time.sleep) -> T:
    """Call ``write()`` and return what it returns; on "database is locked" sleep the next of
    ``delays`` (seconds) and call it again, logging a warning each time. Raises
    :class:`DatabaseBusy` after the last attempt, and any other error at once. Inside an atomic
    block the error is raised as it is: the transaction cannot be continued, only its owner may
    run it again."""
    start = time.monotonic()
    for delay in (*delays, None):
        try:
            return write()
        except OperationalError as exc:
            if not is_locked(exc) or connection.in_atomic_block:
                raise
            if delay is None:
                raise DatabaseBusy(what, time.monotonic() - start) from exc
            log.warning("database locked while %s; trying again in %.1f s", what, delay)
            sleep(delay)
    raise AssertionError("unreachable")
