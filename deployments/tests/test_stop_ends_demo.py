"""``make stop`` ends a running ``make demo`` before it stops the deployments (``services.py
stop-demo``, ``deployments/demo_run.py``): otherwise the demo went on deploying after the stop
and left an engine with no agent.

The demo stand-in is a real process that enters :class:`~deployments.demo_run.DemoRun` exactly as
``manage.py demo`` does and then waits, as the demo waits on a deployment or a sweep; the script
runs as a subprocess with a private ``CEILING_VAR_DIR``, so no process of the machine is touched."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from deployments.demo_run import DemoAlreadyRunning, DemoRun, live_demo_pid
from deployments.supervisor.procfs import proc_stat

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "services.py"

DEMO_STAND_IN = """
import sys, time
from pathlib import Path
from deployments.demo_run import DemoRun, DemoStopped
try:
    with DemoRun(Path(sys.argv[1])):
        print("waiting", flush=True)
        while True:
            time.sleep(0.05)
except DemoStopped as exc:
    print(f"ended: {exc}", flush=True)
    sys.exit(143)
"""


def start_demo(run_dir: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", DEMO_STAND_IN, str(run_dir)], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "waiting"
    return proc


def run_script(var: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], env={**os.environ, "CEILING_VAR_DIR": str(var)},
                          capture_output=True, text=True, timeout=60)


def test_stop_demo_ends_the_running_demo_and_removes_its_pid_file(tmp_path):
    demo = start_demo(tmp_path / "run")
    record = json.loads((tmp_path / "run" / "demo.pid").read_text())
    assert record["pid"] == demo.pid and record["start_ticks"] == proc_stat(demo.pid).start_ticks

    done = run_script(tmp_path, "stop-demo")

    assert done.returncode == 0, done.stderr
    assert done.stdout == f"stopped the running demo (pid {demo.pid})\n"
    assert demo.wait(timeout=10) == 143       # it ended through DemoStopped, not killed
    assert demo.stdout.read().startswith("ended: stopped by SIGTERM (`make stop`)")
    assert not (tmp_path / "run" / "demo.pid").exists()


def test_stop_without_names_ends_the_demo_before_the_services(tmp_path):
    demo = start_demo(tmp_path / "run")
    worker = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        (tmp_path / "run" / "worker.pid").write_text(json.dumps(
            {"pid": worker.pid, "start_ticks": proc_stat(worker.pid).start_ticks, "argv": ["sleep", "60"]}))

        done = run_script(tmp_path, "stop")

        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [f"stopped the running demo (pid {demo.pid})",
                                            f"stopped worker (pid {worker.pid})"]
        assert demo.wait(timeout=10) == 143 and worker.wait(timeout=10) == -signal.SIGTERM
    finally:
        worker.kill()


def test_a_stale_demo_pid_file_is_removed_without_signalling_anyone(tmp_path):
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        run = tmp_path / "run"
        run.mkdir()
        # The bystander's pid with other start ticks: a demo that ended and whose pid was reused.
        (run / "demo.pid").write_text(json.dumps(
            {"pid": bystander.pid, "start_ticks": proc_stat(bystander.pid).start_ticks + 1, "argv": []}))

        done = run_script(tmp_path, "stop-demo")

        assert done.returncode == 0 and done.stdout == ""
        assert not (run / "demo.pid").exists()
        time.sleep(0.2)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait(timeout=10)


def test_status_names_a_running_demo(tmp_path):
    demo = start_demo(tmp_path / "run")
    try:
        done = run_script(tmp_path, "status")
        assert done.returncode == 0
        assert done.stdout.splitlines()[-1] == f"demo    running (pid {demo.pid}; make stop ends it first)"
    finally:
        demo.kill()
        demo.wait(timeout=10)
    assert "demo" not in run_script(tmp_path, "status").stdout   # an ended demo is not listed


def test_stop_demo_takes_no_names(tmp_path):
    done = run_script(tmp_path, "stop-demo", "web")

    assert done.returncode == 2 and done.stderr == "error: stop-demo takes no names\n"


def test_a_second_demo_is_refused_while_one_runs_and_the_marker_restores_sigterm(tmp_path):
    run = tmp_path / "run"
    demo = start_demo(run)
    handler = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(DemoAlreadyRunning, match=rf"another demo is running \(pid {demo.pid}, "):
            DemoRun(run).__enter__()
        assert signal.getsignal(signal.SIGTERM) is handler   # a refused marker installs nothing
    finally:
        demo.kill()
        demo.wait(timeout=10)
    # Its pid file is stale now: this process may take the marker, and gives SIGTERM back on exit.
    before = signal.getsignal(signal.SIGTERM)
    with DemoRun(run):
        assert live_demo_pid(run) == os.getpid()
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before
    assert not (run / "demo.pid").exists()


@pytest.mark.django_db
def test_manage_py_demo_refuses_to_run_beside_a_running_demo(tmp_path, settings):
    settings.VAR_DIR = tmp_path
    demo = start_demo(tmp_path / "run")
    try:
        with pytest.raises(CommandError, match=rf"^refused: another demo is running \(pid {demo.pid}, .*make stop"):
            call_command("demo", "--no-sweep", stdout=open(os.devnull, "w"))
    finally:
        demo.kill()
        demo.wait(timeout=10)
