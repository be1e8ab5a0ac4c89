#!/usr/bin/env python3
"""Start, stop and show Ceiling's long-running processes for the embedded default.

Processes: ``web`` (daphne: HTTP + websockets), ``worker`` (Celery worker on the control
queue), ``agent`` (``manage.py node_agent``: this node's agent, a Celery worker on
``node.<name>`` that owns the engine processes), ``beat`` (Celery beat). Stopping the agent
leaves the engines running; the next agent adopts them. Each starts detached in its own session
with its output in ``var/logs/<name>.log``; ``var/run/<name>.pid`` records the pid *and* its
start time (field 22 of ``/proc/<pid>/stat``) so a reused pid is never signalled.

Usage: ``services.py status``, ``services.py start [<name>...]``, ``services.py stop
[<name>...]``, ``services.py stop-demo`` or ``services.py restart <name>...`` (e.g. ``restart
web`` restarts only the web server, ``stop agent`` stops only the agent, ``start beat`` starts
only beat). A name that is not one of the services above is refused with exit status 2 and
nothing is started or stopped. ``stop`` without names first ends a running ``manage.py demo``
(``stop-demo``), then stops every service (beat, agent, worker, then web). ``stop-demo`` ends only
the demo that ``var/run/demo.pid`` names (``deployments/demo_run.py``; same pid and start ticks):
SIGTERM to that process alone (it runs in the foreground of a terminal, whose process group it
shares), SIGKILL after :data:`DEMO_GRACE_S`; ``make stop`` runs it before stopping the
deployments, so the demo cannot launch an engine after they were stopped. ``start`` without
names restarts what is already running so code changes are picked up, except a service with work
in flight that a restart would cut off (``manage.py work_in_flight``: a sweep the control worker is
running, a kernel job the agent is building or benchmarking): that one is left running and named
with its work; ``restart <name>`` restarts it anyway. ``start <name>...``
starts only the named services that are not running and leaves a running one as it is (it says
so; ``restart`` restarts it). Whenever the web server was started, the command waits until it
answers. After starting, each service must still be running :data:`SETTLE_S` seconds later; one
that exited (a bad setting, e.g. ``CEILING_SAMPLER_HZ``) is reported with the last lines of its
log and a non-zero exit; the Celery services (worker, agent) count as started only once their log
says they are ready (:data:`READY_S`).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VAR = Path(os.environ.get("CEILING_VAR_DIR", ROOT / "var"))
RUN = VAR / "run"
LOGS = VAR / "logs"
BIN = ROOT / ".venv" / "bin"
PORT = int(os.environ.get("CEILING_PORT", "8000"))
HOST = os.environ.get("CEILING_HOST", "127.0.0.1")
NODE = os.environ.get("CEILING_NODE_NAME", "local")
#: Seconds a started service must stay up before it counts as started (a bad setting makes a
#: Django command exit within about a second).
SETTLE_S = 2.0
#: Celery services: started only once their log says ``<name>@<host> ready.`` (Celery's line when
#: it consumes), which a worker that fails while importing its tasks never prints.
CELERY_SERVICES = ("worker", "agent")
#: Seconds a Celery service may take to get ready (imports on a loaded 2-core host take ~10 s).
READY_S = 120.0
# Size of each service's log when this command started it: its "ready." line comes after.
_LOG_START: dict[str, int] = {}


def commands() -> dict[str, list[str]]:
    return {
        "web": [str(BIN / "daphne"), "-b", HOST, "-p", str(PORT), "controlplane.asgi:application"],
        "worker": [
            str(BIN / "celery"), "-A", "controlplane", "worker", "-l", "info",
            "-Q", "control", "-n", "ceiling-control@%h", "--concurrency",
            os.environ.get("CEILING_CONTROL_CONCURRENCY", "2"),
        ],
        "agent": [str(BIN / "python"), str(ROOT / "manage.py"), "node_agent", "--name", NODE],
        "beat": [
            str(BIN / "celery"), "-A", "controlplane", "beat", "-l", "info",
            "-s", str(VAR / "celerybeat-schedule"),
        ],
    }


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3 onwards of /proc/<pid>/stat (state first), or None if the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    return raw[raw.rindex(")") + 2:].split()


def start_ticks(pid: int) -> int | None:
    """Field 22 (starttime, clock ticks since boot) of /proc/<pid>/stat, or None if gone."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def read_pidfile(name: str) -> dict | None:
    try:
        return json.loads((RUN / f"{name}.pid").read_text())
    except (OSError, ValueError):
        return None


def alive(name: str) -> int | None:
    """The pid of service ``name`` when its pid file names a running process: same pid and
    start ticks, and not a zombie (state ``Z``/``X``: it has ended and only waits for its
    parent to reap it, which must not make a stop wait out its grace period)."""
    rec = read_pidfile(name)
    if not rec:
        return None
    fields = _stat_fields(rec["pid"])
    if not fields or int(fields[19]) != rec["start_ticks"] or fields[0] in ("Z", "X"):
        return None
    return rec["pid"]


def stop(name: str, grace: float = 10.0) -> None:
    """Stop service ``name`` if its pid file names a live process (same pid *and* start ticks):
    SIGTERM to its process group (each service leads its own session), SIGKILL after ``grace``
    seconds; then remove the pid file. A stale pid file is removed without signalling anyone."""
    pid = alive(name)
    if pid is None:
        (RUN / f"{name}.pid").unlink(missing_ok=True)
        return
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and alive(name):
        time.sleep(0.1)
    if alive(name):
        os.killpg(pid, signal.SIGKILL)
    (RUN / f"{name}.pid").unlink(missing_ok=True)
    print(f"stopped {name} (pid {pid})")


#: Seconds the demo gets to end after SIGTERM (it raises at once; a blocking read is interrupted).
DEMO_GRACE_S = 15.0


def stop_demo(grace: float = DEMO_GRACE_S) -> None:
    """End the running ``manage.py demo`` that ``var/run/demo.pid`` names, if any: SIGTERM to that
    pid only, SIGKILL after ``grace`` seconds, then remove the file. A stale file (the pid gone or
    reused) is removed without signalling anyone."""
    pid = alive("demo")
    if pid is None:
        (RUN / "demo.pid").unlink(missing_ok=True)
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and alive("demo"):
        time.sleep(0.1)
    if alive("demo"):
        os.kill(pid, signal.SIGKILL)
        while alive("demo") and time.monotonic() < deadline + 5:
            time.sleep(0.1)
    (RUN / "demo.pid").unlink(missing_ok=True)
    print(f"stopped the running demo (pid {pid})")


def start(name: str, argv: list[str]) -> subprocess.Popen:
    """Start ``name`` detached with ``argv``, record its pid file; return the process."""
    RUN.mkdir(parents=True, exist_ok=True)
    LOGS.mkdir(parents=True, exist_ok=True)
    log_path = LOGS / f"{name}.log"
    _LOG_START[name] = log_path.stat().st_size if log_path.exists() else 0
    log = open(log_path, "ab")
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    ticks = None
    for _ in range(50):
        ticks = start_ticks(proc.pid)
        if ticks is not None:
            break
        time.sleep(0.01)
    (RUN / f"{name}.pid").write_text(json.dumps({"pid": proc.pid, "start_ticks": ticks, "argv": argv}))
    print(f"started {name} (pid {proc.pid}), log {LOGS / (name + '.log')}")
    return proc


def settle(procs: dict[str, subprocess.Popen]) -> list[str]:
    """Wait :data:`SETTLE_S` seconds and return the names of started services that exited,
    writing each one's exit status and the last 20 lines of its log to stderr."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline and all(p.poll() is None for p in procs.values()):
        time.sleep(0.1)
    dead = [name for name, p in procs.items() if p.poll() is not None]
    for name in dead:
        tail = (LOGS / f"{name}.log").read_text(errors="replace").splitlines()[-20:]
        sys.stderr.write(f"error: {name} exited at once with status {procs[name].returncode}; "
                         f"last lines of {LOGS / (name + '.log')}:\n" + "\n".join(tail) + "\n")
    return dead


def wait_celery_ready(procs: dict[str, subprocess.Popen], timeout: float = READY_S) -> list[str]:
    """Wait until each started Celery service (:data:`CELERY_SERVICES`) has written Celery's
    ``ready.`` line to its log since it was started; return the names that exited first or did
    not get ready within ``timeout`` seconds, writing why and the last 20 lines of the log to
    stderr."""
    waiting = {name: p for name, p in procs.items() if name in CELERY_SERVICES}
    deadline = time.monotonic() + timeout
    failed: list[str] = []
    while waiting:
        for name, proc in list(waiting.items()):
            with open(LOGS / f"{name}.log", "rb") as f:
                f.seek(_LOG_START.get(name, 0))
                text = f.read().decode(errors="replace")
            if any(line.rstrip().endswith(" ready.") for line in text.splitlines()):
                del waiting[name]
            elif proc.poll() is not None or time.monotonic() > deadline:
                why = (f"exited with status {proc.returncode} before it was ready" if proc.poll() is not None
                       else f"did not report ready within {timeout:.0f} s")
                sys.stderr.write(f"error: {name} {why}; last lines of {LOGS / (name + '.log')}:\n"
                                 + "\n".join(text.splitlines()[-20:]) + "\n")
                failed.append(name)
                del waiting[name]
        if waiting:
            time.sleep(0.2)
    return failed


def wait_web(timeout: float = 60.0) -> bool:
    url = f"http://{HOST}:{PORT}/login/"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive("web") is None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.25)
    return False


def refused(action: str, names: list[str], cmds: dict[str, list[str]], otherwise: str) -> bool:
    """Print why ``names`` holds a name that is no service (stderr) and return True; else False."""
    unknown = [n for n in names if n not in cmds]
    if unknown:
        sys.stderr.write(f"error: unknown service {', '.join(unknown)}; {action} takes names out of "
                         f"{', '.join(cmds)}, {otherwise}\n")
    return bool(unknown)


def work_in_flight() -> dict[str, list[str]]:
    """``{"worker": [...], "agent": [...]}`` from ``manage.py work_in_flight``: the work each running
    service holds that a restart would cut off. A failed read (say, a database not migrated yet)
    is said on stderr and counts as none, so start does what it did before it asked."""
    try:
        proc = subprocess.run([str(BIN / "python"), str(ROOT / "manage.py"), "work_in_flight", "--node", NODE],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
        if proc.returncode == 0:
            found = json.loads(proc.stdout)
            return {name: [str(w) for w in work] for name, work in found.items() if isinstance(work, list)}
        why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
    except (OSError, subprocess.TimeoutExpired, ValueError, AttributeError) as exc:
        why = str(exc)
    sys.stderr.write(f"warning: could not tell what work the services hold ({why}); restarting them\n")
    return {}


def main(argv: list[str]) -> int:
    action = argv[1] if len(argv) > 1 else "status"
    cmds = commands()
    if action == "stop-demo":
        if argv[2:]:
            sys.stderr.write("error: stop-demo takes no names\n")
            return 2
        stop_demo()
        return 0
    if action == "stop":
        names = argv[2:]
        if refused(action, names, cmds, "or none to stop them all"):
            return 2
        if not names:
            stop_demo()
        # Reverse start order whichever names were given: beat and the agent go before the
        # worker and the web server they send work to.
        for name in reversed(list(cmds)):
            if not names or name in names:
                stop(name)
        return 0
    if action == "status":
        for name in cmds:
            pid = alive(name)
            rec = read_pidfile(name) if pid is None else None
            if pid:
                print(f"{name:7s} running (pid {pid})")
            elif rec and isinstance(rec.get("pid"), int):
                # a clean stop removes the pid file: one left behind names a process that ended on its own
                print(f"{name:7s} not running: pid {rec['pid']} ended without a stop (crashed or killed; see "
                      f"{LOGS / (name + '.log')}; `scripts/services.py start {name}` starts it)")
            else:
                print(f"{name:7s} stopped")
        demo = alive("demo")
        if demo:
            print(f"demo    running (pid {demo}; make stop ends it first)")
        return 0
    if action == "start" and argv[2:]:
        names = argv[2:]
        if refused(action, names, cmds, "or none to start them all (restarting any that run)"):
            return 2
        procs = {}
        # Start order whichever order the names came in: the web server and the worker before
        # the agent and beat that send them work.
        for name in cmds:
            if name not in names:
                continue
            pid = alive(name)
            if pid is not None:
                print(f"{name} already running (pid {pid}); left as it is (restart {name} restarts it)")
                continue
            stop(name)  # removes a stale pid file
            procs[name] = start(name, cmds[name])
    elif action in ("start", "restart"):
        names = list(cmds) if action == "start" else argv[2:]
        unknown = [n for n in names if n not in cmds]
        if not names or unknown:
            sys.stderr.write(f"error: restart needs service names out of {', '.join(cmds)}"
                             + (f"; unknown: {', '.join(unknown)}" if unknown else "") + "\n")
            return 2
        busy = work_in_flight() if action == "start" and any(alive(n) for n in names) else {}
        procs = {}
        for name in names:
            pid = alive(name)
            if pid is not None and busy.get(name):
                print(f"{name} left running (pid {pid}): {', '.join(busy[name])} runs on it and a restart would "
                      f"cut it off; `scripts/services.py restart {name}` restarts it anyway")
                continue
            stop(name)
            procs[name] = start(name, cmds[name])
    if action in ("start", "restart"):
        if procs and settle(procs):
            return 1
        if wait_celery_ready(procs):
            return 1
        if "web" in procs and not wait_web():
            sys.stderr.write(f"error: the web server did not answer on {HOST}:{PORT}; see {LOGS / 'web.log'}\n")
            sys.stderr.write((LOGS / "web.log").read_text()[-3000:] + "\n")
            return 1
        return 0
    sys.stderr.write(__doc__ + "\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
