"""The embedded SQLite database runs in WAL mode, so a long read no longer blocks a writer
(a 131 s list query once failed heartbeats, sweep progress and telemetry writes behind it)."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

pytestmark = pytest.mark.skipif(connection.vendor != "sqlite", reason="the embedded SQLite default only")

# The reader: a second process with its own connection that opens a read transaction, reads, says
# so, and keeps the transaction open until told to end it.
READER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN")
conn.execute("SELECT count(*) FROM auth_user").fetchone()
print("reading", flush=True)
sys.stdin.readline()
print(conn.execute("SELECT count(*) FROM auth_user").fetchone()[0], flush=True)
conn.execute("COMMIT")
"""


@pytest.mark.django_db
def test_it_opens_every_connection_in_wal_with_normal_sync():
    with connection.cursor() as cursor:
        assert cursor.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert cursor.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL


@pytest.mark.django_db(transaction=True)
def test_it_writes_while_another_process_holds_a_long_read():
    get_user_model().objects.create(username="before")
    path = connection.settings_dict["NAME"]
    reader = subprocess.Popen([sys.executable, "-c", READER, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert reader.stdout.readline().strip() == "reading"
        with connection.cursor() as cursor:
            # Fail fast instead of the 20 s wait: in the rollback journal this write would wait
            # for the reader's shared lock and fail "database is locked".
            cursor.execute("PRAGMA busy_timeout = 2000")
        start = time.monotonic()
        get_user_model().objects.create(username="during")
        assert time.monotonic() - start < 1.0
        reader.stdin.write("\n")
        reader.stdin.flush()
        # The reader's snapshot is the one its transaction began with: it never saw the write.
        assert reader.stdout.readline().strip() == "1"
        assert reader.wait(timeout=30) == 0
    finally:
        if reader.poll() is None:
            reader.kill()
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout = 20000")
    assert get_user_model().objects.filter(username__in=["before", "during"]).count() == 2
