"""``scripts/services.py stop``, ``restart`` and ``start``: the script runs as a subprocess with a
private ``CEILING_VAR_DIR`` (or, where it would start something, in this process with every
service's command replaced by ``sleep``), so its pid files name throwaway ``sleep`` processes of
this test and never a service of the machine."""
from __future__ import annotations

import importlib.util
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


# --- start <name>... ---------------------------------------------------------------------------
# Run in this process with each service's command replaced by a ``sleep`` (module attributes
# patched), so even a faulty ``start`` can only ever launch a throwaway process.


def _script_module(tmp_path, monkeypatch):
    """``scripts/services.py`` loaded as a fresh module with ``var/`` at ``tmp_path`` and a 0.2 s settle."""
    spec = importlib.util.spec_from_file_location("ceiling_services_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "VAR", tmp_path)
    monkeypatch.setattr(module, "RUN", tmp_path / "run")
    monkeypatch.setattr(module, "LOGS", tmp_path / "logs")
    monkeypatch.setattr(module, "SETTLE_S", 0.2)
    return module


@pytest.fixture
def script(tmp_path, monkeypatch):
    """``scripts/services.py`` loaded as a module with ``var/`` at ``tmp_path``, every service
    a ``sleep`` (web 60 s, worker 61 s, agent 62 s, beat 63 s: the argv tells them apart), a
    0.2 s settle and a web server that always answers.
    Whatever it started is killed (and reaped) afterwards."""
    module = _script_module(tmp_path, monkeypatch)
    monkeypatch.setattr(module, "commands", lambda: {name: ["sleep", str(60 + i)] for i, name in enumerate(SERVICES)})
    monkeypatch.setattr(module, "wait_web", lambda timeout=60.0: True)
    monkeypatch.setattr(module, "wait_celery_ready", lambda procs, timeout=0.0: [])
    # No sweep or kernel job in flight unless a test says so (the real answer comes from
    # manage.py work_in_flight, tested on its own in controlplane/tests/test_work_in_flight.py).
    monkeypatch.setattr(module, "work_in_flight", lambda: {})
    before = {name: module.read_pidfile(name) for name in SERVICES}
    yield module
    for name in SERVICES:
        rec = module.read_pidfile(name)
        if rec and rec != before[name] and module.alive(name):
            os.killpg(rec["pid"], signal.SIGKILL)
            os.waitpid(rec["pid"], 0)


def pid_of(tmp_path: Path, name: str) -> int | None:
    path = tmp_path / "run" / f"{name}.pid"
    return json.loads(path.read_text())["pid"] if path.exists() else None


def test_it_starts_only_the_named_service(script, tmp_path, capsys):
    assert script.main(["services.py", "start", "beat"]) == 0

    out = capsys.readouterr().out
    pid = pid_of(tmp_path, "beat")
    assert out == f"started beat (pid {pid}), log {tmp_path / 'logs' / 'beat.log'}\n"
    assert script.alive("beat") == pid
    assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", b"63"]
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["beat.pid"]


def test_it_starts_several_named_services_in_start_order(script, tmp_path, capsys):
    assert script.main(["services.py", "start", "beat", "worker"]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines] == ["worker", "beat"]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["beat.pid", "worker.pid"]


def test_it_leaves_a_named_service_that_already_runs_and_says_so(script, services, tmp_path, capsys):
    (tmp_path / "run" / "beat.pid").unlink()
    services["beat"].kill()

    assert script.main(["services.py", "start", "agent", "beat"]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (f"agent already running (pid {services['agent'].pid}); left as it is "
                        "(restart agent restarts it)")
    assert lines[1].startswith("started beat (pid ")
    assert len(lines) == 2
    assert services["agent"].poll() is None and pid_of(tmp_path, "agent") == services["agent"].pid
    assert script.alive("beat") == pid_of(tmp_path, "beat") != services["beat"].pid
    for name in ("web", "worker"):
        assert services[name].poll() is None and pid_of(tmp_path, name) == services[name].pid


def test_it_refuses_an_unknown_name_to_start_and_starts_nothing(script, tmp_path, capsys):
    assert script.main(["services.py", "start", "beat", "bogus"]) == 2

    captured = capsys.readouterr()
    assert captured.err == ("error: unknown service bogus; start takes names out of web, worker, agent, beat, "
                            "or none to start them all (restarting any that run)\n")
    assert captured.out == ""
    assert not (tmp_path / "run").exists() or list((tmp_path / "run").iterdir()) == []


def test_it_refuses_an_unknown_name_to_start_from_the_command_line(tmp_path):
    done = run_script(tmp_path, "start", "bogus")

    assert done.returncode == 2
    assert done.stderr.startswith("error: unknown service bogus; start takes names out of ")
    assert not (tmp_path / "run").exists()


def test_it_restarts_every_service_when_start_has_no_names(script, services, tmp_path, capsys):
    assert script.main(["services.py", "start"]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] + " " + line.split()[1] for line in lines] == [
        "stopped web", "started web", "stopped worker", "started worker",
        "stopped agent", "started agent", "stopped beat", "started beat"]
    for name, old in services.items():
        assert ended(old) and old.returncode == -signal.SIGTERM
        assert script.alive(name) == pid_of(tmp_path, name) != old.pid


def test_start_without_names_leaves_a_service_with_work_in_flight_running_and_says_why(script, services, tmp_path,
                                                                                     capsys, monkeypatch):
    monkeypatch.setattr(script, "work_in_flight", lambda: {"worker": ["sweep #9 (running)"], "agent": []})

    assert script.main(["services.py", "start"]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == (f"worker left running (pid {services['worker'].pid}): sweep #9 (running) runs on it and a "
                        "restart would cut it off; `scripts/services.py restart worker` restarts it anyway")
    assert [" ".join(line.split()[:2]) for line in lines[:2] + lines[3:]] == [
        "stopped web", "started web", "stopped agent", "started agent", "stopped beat", "started beat"]
    assert services["worker"].poll() is None and pid_of(tmp_path, "worker") == services["worker"].pid
    for name in ("web", "agent", "beat"):
        assert ended(services[name]) and script.alive(name) == pid_of(tmp_path, name) != services[name].pid


def test_restart_names_restart_a_service_even_with_work_in_flight(script, services, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(script, "work_in_flight", lambda: {"worker": ["sweep #9 (running)"], "agent": []})

    assert script.main(["services.py", "restart", "worker"]) == 0

    assert [" ".join(line.split()[:2]) for line in capsys.readouterr().out.splitlines()] == [
        "stopped worker", "started worker"]
    assert ended(services["worker"]) and script.alive("worker") == pid_of(tmp_path, "worker") != services["worker"].pid


def test_a_failed_read_of_the_work_in_flight_is_said_and_counts_as_none(tmp_path, monkeypatch, capsys):
    module = _script_module(tmp_path, monkeypatch)
    monkeypatch.setattr(module, "ROOT", tmp_path)   # no manage.py there: the read fails
    assert module.work_in_flight() == {}
    err = capsys.readouterr().err
    assert err.startswith("warning: could not tell what work the services hold (") and err.endswith(
        "); restarting them\n")


def test_a_celery_service_counts_as_started_only_once_its_log_says_ready(tmp_path, monkeypatch, capsys):
    """A worker that dies while importing (after the settle time) is reported, with its log, and
    the command fails; one that prints Celery's ready line passes."""
    module = _script_module(tmp_path, monkeypatch)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "worker.log").write_text("w@old ready.\n")  # an earlier start's line does not count
    dies = ["sh", "-c", "sleep 0.6; echo 'ImportError: cannot import SafeJSONParser'; exit 1"]
    ready = ["sh", "-c", "sleep 0.4; echo '[INFO/MainProcess] agent-local@vm ready.'; sleep 30"]
    monkeypatch.setattr(module, "commands", lambda: {"web": ["true"], "worker": dies, "agent": ready, "beat": ["true"]})
    try:
        assert module.main(["services.py", "start", "worker", "agent"]) == 1
        err = capsys.readouterr().err
        assert "error: worker exited with status 1 before it was ready" in err
        assert "ImportError: cannot import SafeJSONParser" in err
        assert "agent" not in err.split("last lines")[0]
    finally:
        rec = module.read_pidfile("agent")
        if rec and module.alive("agent"):
            os.killpg(rec["pid"], signal.SIGKILL)
            os.waitpid(rec["pid"], 0)


def test_status_tells_a_service_that_died_from_one_that_was_stopped(services, tmp_path):
    services["agent"].kill()                 # as a crash or `kill -9` leaves it: the pid file stays
    services["agent"].wait(timeout=10)
    run_script(tmp_path, "stop", "beat")     # a clean stop removes its pid file

    lines = dict(line.split(None, 1) for line in run_script(tmp_path, "status").stdout.splitlines())

    assert lines["agent"] == (f"not running: pid {services['agent'].pid} ended without a stop (crashed or killed; "
                              f"see {tmp_path / 'logs' / 'agent.log'}; `scripts/services.py start agent` starts it)")
    assert lines["beat"] == "stopped"
    assert lines["web"] == f"running (pid {services['web'].pid})"
