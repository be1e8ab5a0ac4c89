"""How a stopped engine reads: an engine the supervisor stopped reads "stopped on request" with
the signal and how long it took, whatever its exit status (llama.cpp's server exits 0 on SIGTERM;
the sim and uvicorn end by the signal), and only an engine that ended on its own reads "exited
with code N".

Against real processes under the real shim: a program that shuts down cleanly with code 0 on
SIGTERM the way llama.cpp's server does (``progs/graceful.py``), and the real ``sim`` engine
stopped through the node agent's own teardown."""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from django.utils import timezone

from deployments.supervisor import (
    exit_info_text,
    process_exit_info,
    process_find_by_tag,
    process_spawn,
    process_stop,
)

GRACEFUL = str(Path(__file__).with_name("progs") / "graceful.py")


def spawn(tag: str, log: Path, *args: str):
    handle = process_spawn(spec={"argv": [sys.executable, GRACEFUL, *args], "env": {}}, log_path=log,
                           log_max_bytes=65536, tag=tag)
    deadline = time.monotonic() + 10
    while "ready" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "the program never said ready"
        time.sleep(0.02)
    return handle


def exit_record(handle, log: Path):
    deadline = time.monotonic() + 10
    while (info := process_exit_info(handle, log_path=log)) is None:
        assert time.monotonic() < deadline, "no exit record"
        time.sleep(0.02)
    return info


def test_it_reads_a_clean_exit_0_after_the_supervisor_s_sigterm_as_stopped_on_request(tag, tmp_path):
    log = tmp_path / "engine.log"
    handle = spawn(tag, log, "--shutdown-s", "0.3")

    result = process_stop(handle, grace_s=5, log_path=log)

    assert result.outcome == "terminated" and result.exit_code == 0 and result.signal is None
    assert result.requested and result.stop_signal == signal.SIGTERM
    assert 0.3 <= result.ended_after_s < 3.0
    assert result.reason == f"stopped on request: SIGTERM, ended {result.ended_after_s:.2f} s after it (exit code 0)"
    assert "exited with code" not in result.reason
    # The shim's record says the same to whoever reads it later (the reconcile, a restarted agent).
    info = exit_record(handle, log)
    assert (info.returncode, info.signal, info.stop_signal) == (0, None, signal.SIGTERM)
    assert exit_info_text(info).startswith("stopped on request: SIGTERM, ended 0.")
    assert exit_info_text(info).endswith(" s after it (exit code 0)")
    assert "shutting down on signal 15" in log.read_text()


def test_it_names_the_sigkill_when_the_grace_ran_out(tag, tmp_path):
    log = tmp_path / "engine.log"
    handle = spawn(tag, log, "--shutdown-s", "30")

    result = process_stop(handle, grace_s=0.5, log_path=log)

    assert result.outcome == "killed" and result.requested and result.signal == signal.SIGKILL
    assert 0.5 <= result.ended_after_s < 5.0
    assert result.reason.startswith(f"stopped on request: SIGTERM, ended {result.ended_after_s:.2f} s after it "
                                    "(killed by signal 9 (SIGKILL)); SIGKILL needed after 0.5s grace for pids ")


def test_it_reads_an_exit_the_supervisor_did_not_ask_for_as_exited_with_its_code(tag, tmp_path):
    log = tmp_path / "engine.log"
    handle = spawn(tag, log, "--exit-after", "0.2")
    info = exit_record(handle, log)

    assert (info.returncode, info.stop_signal, info.requested) == (0, None, False)
    assert exit_info_text(info) == "exited with code 0"
    result = process_stop(handle, grace_s=5, log_path=log)
    assert result.outcome == "exited" and not result.requested and result.ended_after_s is None
    assert result.reason == "had already exited before the stop (exited with code 0)"


def test_it_does_not_take_a_signal_to_the_engine_alone_for_a_stop_of_the_group(tag, tmp_path):
    # Someone else's SIGTERM to the engine's pid: the engine shuts down cleanly, but nobody asked
    # the supervisor to stop it, so it reads as an exit of its own.
    log = tmp_path / "engine.log"
    handle = spawn(tag, log, "--shutdown-s", "0")
    os.kill(handle.pid, signal.SIGTERM)
    info = exit_record(handle, log)

    assert (info.returncode, info.stop_signal) == (0, None)
    assert exit_info_text(info) == "exited with code 0"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_it_records_a_sim_engine_stopped_by_the_agent_as_stopped_on_request(db, operator, settings, tmp_path):
    from deployments import services
    from deployments.agent import deployment_launch, deployment_teardown
    from deployments.choices import ProcessStatus
    from deployments.models import Node, NumaNode, ServerProcess
    from deployments.tests.test_agent_support import free_ports, wait_for
    from deployments.topology import format_cpulist

    usable = sorted(os.sched_getaffinity(0))
    settings.CEILING_LOG_DIR = tmp_path / "engines"
    node = Node.objects.create(name="here", hostname="here", cpu_count=len(usable), tools={})
    NumaNode.objects.create(node=node, index=0, cpus=format_cpulist(usable))
    (port,) = free_ports(1)
    spec = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
            "roles": {"single": {"cpus": str(usable[0]), "host": "127.0.0.1", "port": port,
                                 "flags": {"time-scale": 0.05}}},
            "sim": {"profile": "demo-fast"}, "startup_timeout_s": 30, "stop_grace_s": 5}
    recipe = services.recipe_create(user=operator, name="stopped", engine="sim", topology="single", node=node,
                                    spec=spec)
    deployment = services.deployment_create(recipe=recipe, user=operator)
    try:
        assert deployment_launch(deployment_id=deployment.pk) == "launched"
        row = ServerProcess.objects.get(deployment=deployment)
        wait_for(lambda: process_find_by_tag(row.tag), timeout_s=30, what="the sim engine")
    finally:
        assert deployment_teardown(deployment_id=deployment.pk) == "stopped"

    row.refresh_from_db()
    assert (row.status, row.end_reason) == (ProcessStatus.EXITED, "terminated")
    # The sim ends by the signal it was stopped with; the stop still reads as asked for, with how long.
    (stopped,) = deployment.events.filter(kind="stopped", process=row).values_list("message", flat=True)
    assert "stopped on request: SIGTERM, ended " in stopped
    assert stopped.endswith(" s after it (killed by signal 15 (SIGTERM))")
    assert "exited with code" not in stopped
    # The row keeps how it ended (-15, the way subprocess stores a signal) and the page reads
    # it as the stop that was asked for, not as an exit of its own.
    assert row.exit_code == -15
    from deployments.views.deployment_pages import _health_view

    badge = _health_view(row, timezone.now())
    assert badge["text"] == "down (stopped on request, killed by signal 15 (SIGTERM))"
    # Stopped while starting (it never became ready): the deployment says so instead of no reason.
    from deployments.agent import STOPPED_BEFORE_READY

    deployment.refresh_from_db()
    assert deployment.ready_at is None and deployment.reason == STOPPED_BEFORE_READY
    assert deployment.events.filter(kind="stopped", process=None).get().message.endswith(f"({STOPPED_BEFORE_READY})")
