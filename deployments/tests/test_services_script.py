"""``scripts/services.py stop``: the script runs as a subprocess with a private
``CEILING_VAR_DIR``, so its pid files name throwaway ``sleep`` processes of this test and never a
service of the machine."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deployments.supervisor.procfs import proc_stat

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "services.py"
SERVICES = ("web", "worker", "agent", "beat")


@pytest.fixture
def services(tmp_path):
    """One ``sleep`` per service name, each leading its own session as the script's services
    do, with a pid file in ``<tmp>/run`` written the way the script writes it."""
    run = tmp_path / "run"
    run.mkdir()
    procs: dict[str, subprocess.Popen] = {}
    for name in SERVICES:
        proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
        procs[name] = proc
        info = proc_stat(proc.pid)  # the child exists from the moment Popen returns
        assert info is not None
        ticks = info.start_ticks
        (run / f"{name}.pid").write_text(json.dumps({"pid": proc.pid, "start_ticks": ticks, "argv": ["sleep", "60"]}))
    yield procs
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def run_script(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CEILING_VAR_DIR": str(tmp_path)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


def ended(proc: subprocess.Popen) -> bool:
    deadline = time.monotonic() + 5
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc.poll() is not None


def test_it_stops_only_the_named_service(services, tmp_path):
    done = run_script(tmp_path, "stop", "agent")

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"stopped agent (pid {services['agent'].pid})"
    assert ended(services["agent"]) and services["agent"].returncode == -signal.SIGTERM
    assert not (tmp_path / "run" / "agent.pid").exists()
    for name in ("web", "worker", "beat"):
        assert services[name].poll() is None, f"{name} was stopped too"
        assert (tmp_path / "run" / f"{name}.pid").exists()


def test_it_stops_several_named_services_in_reverse_start_order(services, tmp_path):
    done = run_script(tmp_path, "stop", "web", "beat")

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"stopped beat (pid {services['beat'].pid})",
                                        f"stopped web (pid {services['web'].pid})"]
    assert services["worker"].poll() is None and services["agent"].poll() is None


def test_it_refuses_an_unknown_name_and_stops_nothing(services, tmp_path):
    done = run_script(tmp_path, "stop", "agent", "celery")

    assert done.returncode == 2
    assert done.stderr == ("error: unknown service celery; stop takes names out of web, worker, agent, beat, "
                           "or none to stop them all\n")
    assert all(proc.poll() is None for proc in services.values())


def test_it_stops_every_service_without_names(services, tmp_path):
    done = run_script(tmp_path, "stop")

    assert done.returncode == 0, done.stderr
    assert [line.split()[1] for line in done.stdout.splitlines()] == ["beat", "agent", "worker", "web"]
    assert all(ended(proc) for proc in services.values())
    assert list((tmp_path / "run").iterdir()) == []


def test_it_still_refuses_restart_without_a_known_name(services, tmp_path):
    done = run_script(tmp_path, "restart", "celery")

    assert done.returncode == 2
    assert done.stderr == "error: restart needs service names out of web, worker, agent, beat; unknown: celery\n"
    assert all(proc.poll() is None for proc in services.values())
