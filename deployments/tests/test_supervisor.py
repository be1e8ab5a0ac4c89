"""The process supervisor against real processes: detached spawn, identity, descendants that
escaped, stop with a grace period, capped logs, exit records and the restart policy.

Every process started here carries the test's tag; the ``tag`` fixture kills whatever still
carries it at teardown, so a failing test leaves nothing running.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from deployments.supervisor import (
    TAG_ENV,
    ProcessHandle,
    RestartPolicy,
    SpawnError,
    exit_file_for,
    handle_alive,
    log_tail,
    proc_start_ticks,
    process_descendants,
    process_exit_info,
    process_find_by_tag,
    process_identity,
    process_spawn,
    process_stop,
)
from deployments.supervisor.procfs import proc_has_tag, proc_stat

PROGS = Path(__file__).with_name("progs")
SLEEPER = str(PROGS / "sleeper.py")
ESCAPER = str(PROGS / "escaper.py")


@pytest.fixture
def unrelated():
    """A plain child process of the test, outside any supervisor tree."""
    procs: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, SLEEPER], stdout=subprocess.DEVNULL)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=5)


def wait_for(predicate, timeout_s: float = 10.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def spawn(tag: str, tmp_path: Path, argv: list[str], **spec_extra) -> ProcessHandle:
    spec = {"argv": argv, "env": spec_extra.pop("env", {}), **spec_extra}
    return process_spawn(spec=spec, log_path=tmp_path / "proc.log", log_max_bytes=65536, tag=tag)


def read_pidfile(path: Path) -> int:
    return int(wait_for(lambda: path.exists() and path.read_text(), what=f"pid file {path}"))


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


# --- identity -----------------------------------------------------------------------------


def test_it_round_trips_a_handle_through_a_dict():
    handle = ProcessHandle(pid=4321, start_ticks=987654, pgid=4320, sid=4320, tag="abcdef0123456789")
    data = handle.to_dict()
    assert data == {"pid": 4321, "start_ticks": 987654, "pgid": 4320, "sid": 4320, "tag": "abcdef0123456789"}
    assert ProcessHandle.from_dict(json.loads(json.dumps(data))) == handle


def test_it_reads_start_ticks_from_proc_stat():
    raw = Path(f"/proc/{os.getpid()}/stat").read_text()
    expected = int(raw[raw.rfind(")") + 2:].split()[19])
    assert proc_start_ticks(os.getpid()) == expected
    assert proc_start_ticks(2**22 + 1) is None  # above the kernel's pid_max ceiling


# --- spawn ----------------------------------------------------------------------------------


def test_it_spawns_detached_with_a_minimal_environment(tag, tmp_path, monkeypatch):
    monkeypatch.setenv("CEILING_TEST_SHOULD_NOT_LEAK", "1")
    handle = spawn(tag, tmp_path, [sys.executable, SLEEPER], env={"HF_TOKEN": "hf_secret_value_123"})
    info = proc_stat(handle.pid)
    assert info is not None and info.start_ticks == handle.start_ticks
    assert handle.sid == handle.pgid == info.sid == info.pgid
    assert handle.sid != os.getsid(0)
    assert handle_alive(handle)
    assert process_identity(handle) == "running"

    env = environ(handle.pid)
    assert env[TAG_ENV] == tag
    assert env["HF_TOKEN"] == "hf_secret_value_123"
    assert "CEILING_TEST_SHOULD_NOT_LEAK" not in env
    assert set(env) <= {"PATH", "HOME", "LANG", "TMPDIR", "HF_TOKEN", TAG_ENV}
    for pid in (handle.pid, handle.pgid):
        assert b"hf_secret_value_123" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    wait_for(lambda: "ready" in log_tail(tmp_path / "proc.log"), what="sleeper ready")

    result = process_stop(handle, grace_s=5, log_path=tmp_path / "proc.log")
    assert result.outcome == "terminated"
    assert result.signal == signal.SIGTERM
    assert not handle_alive(handle)
    assert "ready" in log_tail(tmp_path / "proc.log")


def test_it_survives_the_spawning_process_exiting(tag, tmp_path):
    out = subprocess.run(
        [sys.executable, str(PROGS / "spawn_and_exit.py"), tag, str(tmp_path / "proc.log")],
        capture_output=True, text=True, timeout=30, check=True,
    )
    data = json.loads(out.stdout)
    handle = ProcessHandle.from_dict(data["handle"])
    assert proc_stat(data["spawner_pid"]) is None  # the spawner is gone and reaped
    assert handle_alive(handle)
    assert process_identity(handle) == "running"
    assert proc_stat(handle.pid).sid != os.getsid(0)

    result = process_stop(handle, grace_s=5, log_path=tmp_path / "proc.log")
    assert result.outcome == "terminated"
    assert result.signal == signal.SIGTERM
    assert process_find_by_tag(tag) == []


def test_it_accepts_a_spec_object_with_attributes(tag, tmp_path):
    spec = SimpleNamespace(
        role="decode", argv=[sys.executable, SLEEPER], env={"SGLANG_LOG_LEVEL": "info"}, cpus="0",
        mem_nodes="", numa_node=None, pin_method="sched_setaffinity", gpu_ids=[], ports={}, host="127.0.0.1",
        health_url="",
    )
    handle = process_spawn(spec=spec, log_path=tmp_path / "proc.log", log_max_bytes=4096, tag=tag)
    assert environ(handle.pid)["SGLANG_LOG_LEVEL"] == "info"
    assert os.sched_getaffinity(handle.pid) == {0}
    assert process_stop(handle, grace_s=5).outcome == "terminated"


def test_it_refuses_a_missing_executable(tag, tmp_path):
    with pytest.raises(SpawnError, match="not found"):
        spawn(tag, tmp_path, ["no-such-engine-binary", "--port", "30000"])
    with pytest.raises(SpawnError, match="not found"):
        spawn(tag, tmp_path, ["/nonexistent/engine"])
    assert process_find_by_tag(tag) == []


def test_it_refuses_a_missing_program_behind_numactl(tag, tmp_path):
    if not shutil.which("numactl"):
        pytest.skip("numactl not installed")
    with pytest.raises(SpawnError, match="no-such-engine-binary"):
        spawn(tag, tmp_path, ["numactl", "--cpunodebind=0", "--", "no-such-engine-binary"], pin_method="numactl")


def test_it_refuses_numactl_pinning_without_numactl_in_argv(tag, tmp_path):
    with pytest.raises(SpawnError, match="does not start with numactl"):
        spawn(tag, tmp_path, [sys.executable, SLEEPER], pin_method="numactl", cpus="0")
    assert process_find_by_tag(tag) == []


def test_it_reports_a_failed_affinity_as_a_spawn_error(tag, tmp_path):
    missing_cpu = str(max(os.sched_getaffinity(0)) + 64)
    with pytest.raises(SpawnError, match="could not start"):
        spawn(tag, tmp_path, [sys.executable, SLEEPER], pin_method="sched_setaffinity", cpus=missing_cpu)
    assert process_find_by_tag(tag) == []
    assert "could not start" in log_tail(tmp_path / "proc.log")


# --- stop -----------------------------------------------------------------------------------


def test_it_kills_a_process_that_ignores_sigterm_after_the_grace_period(tag, tmp_path):
    handle = spawn(tag, tmp_path, [sys.executable, SLEEPER, "--ignore-term"])
    wait_for(lambda: "ready" in log_tail(tmp_path / "proc.log"), what="sleeper ready")
    started = time.monotonic()
    result = process_stop(handle, grace_s=1.5, log_path=tmp_path / "proc.log")
    took = time.monotonic() - started
    assert result.outcome == "killed"
    assert 1.5 <= took < 3.5
    assert handle.pid in result.terminated and handle.pid in result.killed
    assert result.signal == signal.SIGKILL
    assert result.survivors == ()
    assert not handle_alive(handle)
    assert process_find_by_tag(tag) == []


def test_it_kills_a_child_that_escaped_with_setsid(tag, tmp_path):
    pidfile = tmp_path / "escaped.pid"
    handle = spawn(tag, tmp_path, [sys.executable, ESCAPER, "--mode", "setsid", "--pidfile", str(pidfile)])
    escaped = read_pidfile(pidfile)
    info = proc_stat(escaped)
    assert info.sid == escaped != handle.sid
    assert escaped in [d.pid for d in process_descendants(handle)]

    result = process_stop(handle, grace_s=5)
    assert result.outcome == "terminated"
    assert escaped in result.terminated
    assert proc_stat(escaped) is None or not proc_stat(escaped).running
    assert process_find_by_tag(tag) == []


def test_it_kills_an_orphaned_grandchild_that_also_dropped_the_tag(tag, tmp_path):
    pidfile = tmp_path / "escaped.pid"
    handle = spawn(tag, tmp_path, [sys.executable, ESCAPER, "--mode", "orphan-noenv", "--pidfile", str(pidfile)])
    escaped = read_pidfile(pidfile)
    # Its parent exited, so it was reparented to the shim (a child subreaper), not to init.
    info = wait_for(lambda: (i := proc_stat(escaped)) and i.ppid == handle.pgid and i, what="reparenting")
    assert info.sid == escaped
    wait_for(lambda: "sleeper" in Path(f"/proc/{escaped}/cmdline").read_text(), what="re-exec")
    assert not proc_has_tag(escaped, tag)
    assert escaped in [d.pid for d in process_descendants(handle)]

    result = process_stop(handle, grace_s=5)
    assert result.outcome == "terminated"
    assert escaped in result.terminated
    wait_for(lambda: proc_stat(escaped) is None, what="grandchild gone")


def test_it_kills_a_tagged_grandchild_after_its_parent_and_the_shim_died(tag, tmp_path):
    pidfile = tmp_path / "escaped.pid"
    handle = spawn(tag, tmp_path, [sys.executable, ESCAPER, "--mode", "orphan", "--pidfile", str(pidfile)])
    escaped = read_pidfile(pidfile)
    # Worst case: shim and engine both killed outright, so only the tag still links it to us.
    os.kill(handle.pgid, signal.SIGKILL)
    os.kill(handle.pid, signal.SIGKILL)
    wait_for(lambda: not handle_alive(handle), what="engine gone")
    wait_for(lambda: proc_stat(escaped).ppid != handle.pgid, what="reparented away from the shim")
    assert escaped in [d.pid for d in process_descendants(handle)]

    result = process_stop(handle, grace_s=5)
    assert result.outcome == "exited"
    assert result.terminated == (escaped,)
    wait_for(lambda: proc_stat(escaped) is None or not proc_stat(escaped).running, what="grandchild gone")


def test_it_never_signals_a_reused_pid(tag, unrelated):
    other = unrelated()
    ticks = wait_for(lambda: proc_start_ticks(other.pid), what="unrelated process")
    stale = ProcessHandle(pid=other.pid, start_ticks=ticks + 1, pgid=other.pid, sid=other.pid, tag=tag)
    assert not handle_alive(stale)
    assert process_identity(stale) == "mismatch"
    assert process_descendants(stale) == []

    result = process_stop(stale, grace_s=0.5)
    assert result.outcome == "identity_mismatch"
    assert result.terminated == () and result.killed == ()
    time.sleep(0.3)
    assert other.poll() is None
    assert proc_start_ticks(other.pid) == ticks


def test_it_reports_not_running_for_a_process_that_is_gone(tag):
    gone = ProcessHandle(pid=2**22 + 1, start_ticks=1, pgid=2**22 + 1, sid=2**22 + 1, tag=tag)
    assert process_identity(gone) == "gone"
    result = process_stop(gone, grace_s=0.5)
    assert result.outcome == "not_running"


# --- logs and exit records ------------------------------------------------------------------


def test_it_keeps_the_log_under_its_cap_after_ten_times_the_cap(tag, tmp_path):
    cap = 16 * 1024
    log = tmp_path / "proc.log"
    spec = {"argv": [sys.executable, SLEEPER, "--bytes", str(10 * cap), "--exit-code", "0"], "env": {}}
    handle = process_spawn(spec=spec, log_path=log, log_max_bytes=cap, tag=tag)
    wait_for(lambda: process_exit_info(handle, log_path=log), what="exit record")
    wait_for(lambda: not process_find_by_tag(tag), what="shim exit")

    assert log.stat().st_size <= cap
    rotated = Path(f"{log}.1").stat().st_size
    assert 0 < rotated <= cap
    # Rotation happens at a read boundary (pipe reads vary in size under load), so the rotated
    # file alone may hold just under half the cap; together the two keep more than half.
    assert log.stat().st_size + rotated > cap // 2
    tail = log_tail(log, lines=3).splitlines()
    assert tail[-2] == "last line"
    assert tail[-1].endswith(f"process {handle.pid} ended with exit code 0")
    assert process_stop(handle, grace_s=1, log_path=log).outcome == "exited"


def test_the_log_files_and_a_directory_made_for_them_are_owner_only(tag, tmp_path):
    """The log holds the engine's output as written (a printed secret in clear): 0600 files in a
    0700 directory, the rotated ``.1`` included, whatever the umask."""
    log = tmp_path / "engine" / "proc.log"
    spec = {"argv": [sys.executable, SLEEPER, "--bytes", str(4 * 1024), "--exit-code", "0"], "env": {}}
    old_umask = os.umask(0o002)
    try:
        handle = process_spawn(spec=spec, log_path=log, log_max_bytes=1024, tag=tag)
    finally:
        os.umask(old_umask)
    wait_for(lambda: process_exit_info(handle, log_path=log), what="exit record")
    wait_for(lambda: not process_find_by_tag(tag), what="shim exit")

    assert oct(log.parent.stat().st_mode & 0o777) == "0o700"
    assert oct(log.stat().st_mode & 0o777) == "0o600"
    assert oct(Path(f"{log}.1").stat().st_mode & 0o777) == "0o600"
    assert "line 000000" in Path(f"{log}.1").read_text()
    assert log.read_text().endswith(f"process {handle.pid} ended with exit code 0\n")


def test_a_log_file_left_readable_by_others_is_narrowed_to_owner_only(tag, tmp_path):
    log = tmp_path / "proc.log"
    log.write_text("from an earlier run\n")
    log.chmod(0o644)
    handle = spawn(tag, tmp_path, [sys.executable, SLEEPER, "--exit-code", "0"])
    wait_for(lambda: process_exit_info(handle, log_path=log), what="exit record")

    assert oct(log.stat().st_mode & 0o777) == "0o600"
    assert log.read_text().startswith("from an earlier run\nready\n")


def test_it_records_the_exit_code_of_a_crashed_process(tag, tmp_path):
    log = tmp_path / "proc.log"
    spec = {"argv": [sys.executable, SLEEPER, "--exit-code", "3"], "env": {}}
    handle = process_spawn(spec=spec, log_path=log, log_max_bytes=4096, tag=tag)
    info = wait_for(lambda: process_exit_info(handle, log_path=log), what="exit record")
    assert (info.pid, info.start_ticks, info.returncode, info.signal) == (handle.pid, handle.start_ticks, 3, None)
    assert not handle_alive(handle)

    result = process_stop(handle, grace_s=1, log_path=log)
    assert (result.outcome, result.exit_code) == ("exited", 3)
    assert result.terminated == ()


def test_it_ignores_an_exit_record_of_an_earlier_process(tag, tmp_path):
    log = tmp_path / "proc.log"
    exit_file_for(log).write_text(json.dumps({"pid": 1, "start_ticks": 5, "returncode": 0, "signal": None, "ended_at": 0}))
    handle = ProcessHandle(pid=2, start_ticks=6, pgid=2, sid=2, tag=tag)
    assert process_exit_info(handle, log_path=log) is None


def test_it_tails_a_log_across_a_rotation(tmp_path):
    log = tmp_path / "engine.log"
    Path(f"{log}.1").write_text("".join(f"old {i}\n" for i in range(100)))
    log.write_text("new 0\nnew 1\n")
    assert log_tail(log, lines=4) == "old 98\nold 99\nnew 0\nnew 1"
    assert log_tail(log, max_bytes=12, lines=10) == "new 0\nnew 1"
    assert log_tail(tmp_path / "missing.log") == ""


# --- restart policy -------------------------------------------------------------------------


def test_it_backs_off_exponentially_up_to_the_cap():
    policy = RestartPolicy(policy="on-failure", max_failures=10, window_s=3600, backoff_initial_s=1, backoff_max_s=30)
    failures: list[float] = []
    delays = []
    for t in range(7):
        failures.append(float(t))
        action, delay = policy.next_action(failures, now=float(t))
        assert action == "restart"
        delays.append(delay)
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_it_gives_up_after_max_failures_within_the_window():
    policy = RestartPolicy(policy="on-failure", max_failures=3, window_s=60, backoff_initial_s=2, backoff_max_s=60)
    assert policy.next_action([100.0], now=100.0) == ("restart", 2.0)
    assert policy.next_action([100.0, 110.0], now=110.0) == ("restart", 4.0)
    assert policy.next_action([100.0, 110.0, 120.0], now=120.0) == ("give_up", "3 failures within 60s (limit 3)")


def test_it_forgets_failures_older_than_the_window():
    policy = RestartPolicy(policy="on-failure", max_failures=3, window_s=60, backoff_initial_s=2, backoff_max_s=60)
    # The first two failures are more than 60 s old at t=200, so this counts as the first again.
    assert policy.next_action([100.0, 110.0, 200.0], now=200.0) == ("restart", 2.0)
    assert policy.next_action([100.0, 150.0, 200.0], now=200.0) == ("restart", 4.0)


def test_it_never_restarts_with_policy_never():
    policy = RestartPolicy.from_dict({"policy": "never", "ignored_key": 1})
    assert policy.next_action([10.0], now=10.0) == ("give_up", "restart policy is 'never'")


def test_it_rejects_a_bad_policy():
    with pytest.raises(ValueError, match="restart policy"):
        RestartPolicy(policy="always")
    with pytest.raises(ValueError, match="backoff"):
        RestartPolicy(backoff_initial_s=10, backoff_max_s=5)


def test_it_strips_terminal_colours_from_a_log_tail(tmp_path):
    from deployments.supervisor.logs import log_tail

    log = tmp_path / "router0.log"
    log.write_bytes(b"\x1b[2m2026-11-30\x1b[0m \x1b[32m INFO\x1b[0m \x1b[1mhttp_request\x1b[0m method=POST\n")
    assert log_tail(log, lines=5) == "2026-11-30  INFO http_request method=POST"


def test_the_end_note_follows_the_last_line_the_process_wrote(tag, tmp_path):
    """The process grows its pipe to 512 KiB, fills it and ends while its shim is stopped, so the
    shim reaps it with most of its output still in the pipe (one read takes 64 KiB): the shim must
    log all of it before its "ended with" note, so a tail that ends with the note shows the
    process's real last line above it (the note used to come after the first 64 KiB)."""
    log, go = tmp_path / "burst.log", tmp_path / "go"
    spec = {"argv": [sys.executable, SLEEPER, "--bytes", str(400 * 1024), "--pipe-bytes", str(512 * 1024),
                     "--after", str(go), "--exit-code", "0"], "env": {}}
    handle = process_spawn(spec=spec, log_path=log, log_max_bytes=8 * 1024 * 1024, tag=tag)
    wait_for(lambda: "ready" in log_tail(log), what="ready")
    shim = proc_stat(handle.pid).ppid
    os.kill(shim, signal.SIGSTOP)
    try:
        go.touch()
        # the process ends while the shim cannot read: a zombie until the shim reaps it
        wait_for(lambda: proc_stat(handle.pid) is not None and proc_stat(handle.pid).state == "Z", what="the end")
    finally:
        os.kill(shim, signal.SIGCONT)
    wait_for(lambda: process_exit_info(handle, log_path=log), what="exit record")
    wait_for(lambda: not process_find_by_tag(tag), what="shim exit")

    tail = log_tail(log, lines=2).splitlines()
    assert tail[0] == "last line", tail
    assert tail[1].endswith(f"process {handle.pid} ended with exit code 0")
