"""The running demo's pid file, so that ``make stop`` can end the demo before it stops the engines.

``make demo`` runs ``manage.py demo`` in the foreground; ``make stop`` (another terminal) used to
stop the deployments and then the services while the demo went on deploying, so an engine the
demo launched between the two was left running with no agent. Now the demo records itself in
``<var>/run/demo.pid`` while it deploys and sweeps, in the format ``scripts/services.py`` writes
for its services (``{"pid", "start_ticks", "argv"}``, start ticks from field 22 of
``/proc/<pid>/stat``, so a reused pid is never taken for it), and ``services.py stop-demo``
(the first step of ``make stop``) sends it SIGTERM and waits for it to end before anything else
is stopped. SIGTERM makes the demo raise :class:`DemoStopped` wherever it is, so it ends with one
line saying why instead of being cut off mid-sentence.

No Django import (``deployments.supervisor.procfs`` has none): the tests use this module in plain processes.
"""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from deployments.supervisor.procfs import proc_stat

PID_NAME = "demo.pid"


class DemoStopped(Exception):
    """Raised in the demo by SIGTERM (``make stop``): the demo ends, said in one line."""


class DemoAlreadyRunning(Exception):
    """Another demo's pid file names a live process (same pid and start ticks)."""

    def __init__(self, pid: int, path: Path):
        super().__init__(f"another demo is running (pid {pid}, {path}); wait for it or end it with `make stop`")
        self.pid = pid


def _start_ticks(pid: int) -> int | None:
    """Start ticks of ``pid`` (:func:`deployments.supervisor.procfs.proc_stat`), None if the
    process is gone or has ended (zombie)."""
    info = proc_stat(pid)
    return info.start_ticks if info is not None and info.running else None


def live_demo_pid(run_dir: Path) -> int | None:
    """The pid ``<run_dir>/demo.pid`` names when that process still runs (same pid *and* start
    ticks), else None (no file, unreadable, or stale)."""
    try:
        record = json.loads((Path(run_dir) / PID_NAME).read_text())
        pid, ticks = int(record["pid"]), int(record["start_ticks"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pid if _start_ticks(pid) == ticks else None


class DemoRun:
    """``with DemoRun(run_dir):`` marks this process as the running demo.

    On entry: :class:`DemoAlreadyRunning` if another live demo holds the pid file; otherwise the
    file is written and SIGTERM raises :class:`DemoStopped` in this (main) thread. On exit the
    previous SIGTERM handler comes back and the file is removed if it is still this process's.
    """

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / PID_NAME
        self._previous = None
        self._installed = False

    def __enter__(self) -> DemoRun:
        other = live_demo_pid(self.path.parent)
        if other is not None and other != os.getpid():
            raise DemoAlreadyRunning(other, self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        record = {"pid": os.getpid(), "start_ticks": _start_ticks(os.getpid()), "argv": sys.argv[:3]}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, self.path)
        self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        self._installed = True
        return self

    @staticmethod
    def _on_sigterm(signum, frame):
        raise DemoStopped("stopped by SIGTERM (`make stop`): it stops this demo's deployments and the services")

    def __exit__(self, *exc) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous if self._previous is not None else signal.SIG_DFL)
            self._installed = False
        if live_demo_pid(self.path.parent) == os.getpid():
            self.path.unlink(missing_ok=True)
