"""Liveness of a ready engine whose health URL times out: a process that computes meanwhile is
busy, not failing (it stays ready and nothing is counted), up to ``CEILING_LIVENESS_BUSY_GRACE_S``
without an answer; a process that makes no CPU progress is hung and the timeout counts.

Real ``sim`` engines under the real shim, launched in-process; the monitor's pass
(:func:`deployment_check`) is called directly, with a liveness period of 0 so each pass probes.
The busy engine is the sim with ``--health-busy-s 3``: while a generation is in flight its
``/health`` computes for 3 s on the serving loop before answering, as llama-cpp-python's server
under a benchmark answers only between requests. The hung one is a real sim stopped with SIGSTOP.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from deployments import services
from deployments.agent import (
    LIVENESS_BUSY_CPU_S,
    deployment_check,
    deployment_launch,
    deployment_teardown,
    liveness_timeout_verdict,
)
from deployments.choices import ProcessStatus
from deployments.models import Node, NumaNode, ServerProcess
from deployments.readiness import HTTP_TIMEOUT_S
from deployments.supervisor.procfs import proc_stat, proc_tree_cpu_s
from deployments.tests.test_agent_support import free_ports, wait_for
from deployments.topology import format_cpulist

pytestmark = pytest.mark.slow

USABLE = sorted(os.sched_getaffinity(0))
HEALTH_BUSY_S = 3.0
# What a busy probe's detail reads like; the numbers are captured and checked by each test.
BUSY = re.compile(
    r"http://127\.0\.0\.1:(?P<port>\d+)/health did not answer within 2\.0 s \(ReadTimeout\) while the process used "
    r"(?P<cpu>\d+\.\d\d) s of CPU in the (?P<waited>\d+\.\d) s probe: busy, not counted as a failure "
    r"\(no answer for (?P<silent>\d+\.\d) s; a busy process is given 600 s\)")


@pytest.fixture
def node(db):
    """A CPU-only node whose one NUMA node holds exactly the CPUs this test process may use."""
    node = Node.objects.create(name="here", hostname="here", cpu_count=len(USABLE), tools={})
    NumaNode.objects.create(node=node, index=0, cpus=format_cpulist(USABLE))
    return node


@pytest.fixture
def sim(node, operator, settings, tmp_path):
    """A ready single ``sim`` server (``--health-busy-s 3``, 50 ms per output token), launched
    in-process and probed until ready; torn down at the end whatever the test did to it."""
    settings.CEILING_LOG_DIR = tmp_path / "engines"
    settings.CEILING_LIVENESS_PERIOD_S = 0.0
    settings.CEILING_LIVENESS_FAILURES = 3
    settings.CEILING_LIVENESS_BUSY_GRACE_S = 600.0
    (port,) = free_ports(1)
    spec = {
        "model": {"name": "sim/tiny"},
        "served_model_name": "tiny",
        "roles": {"single": {"cpus": str(USABLE[0]), "host": "127.0.0.1", "port": port,
                             "flags": {"time-scale": 10.0, "startup-delay-s": 0.0,
                                       "health-busy-s": HEALTH_BUSY_S}}},
        "sim": {"profile": "demo-fast"},
        "startup_timeout_s": 60,
        "stop_grace_s": 5,
    }
    recipe = services.recipe_create(user=operator, name="busy", engine="sim", topology="single", node=node, spec=spec)
    deployment = services.deployment_create(recipe=recipe, user=operator)
    assert deployment_launch(deployment_id=deployment.pk) == "launched"
    wait_for(lambda: deployment_check(deployment_id=deployment.pk) or row_of(deployment).status == ProcessStatus.READY,
             timeout_s=60, what="the sim to be ready")
    yield deployment
    row = row_of(deployment)
    if row.pid:
        try:
            os.kill(row.pid, signal.SIGCONT)  # a stopped engine could not act on SIGTERM
        except ProcessLookupError:
            pass
    deployment_teardown(deployment_id=deployment.pk)


def row_of(deployment) -> ServerProcess:
    return ServerProcess.objects.get(deployment=deployment)


def liveness_events(deployment) -> list[str]:
    return list(deployment.events.filter(kind="liveness").values_list("message", flat=True))


@contextmanager
def generating(port: int) -> Iterator[None]:
    """One long streamed generation (2000 tokens at 50 ms each) in flight on the sim for the
    duration of the block: started and seen to yield its first token before the block runs,
    abandoned by the client at its end (the sim then cancels it)."""
    stop, first = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        body = {"text": "Hello", "stream": True, "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True}}
        try:
            with httpx.Client(trust_env=False, timeout=30) as client, \
                    client.stream("POST", f"http://127.0.0.1:{port}/generate", json=body) as response:
                for line in response.iter_lines():
                    if line.startswith("data:"):
                        first.set()
                    if stop.is_set():
                        return
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            first.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert first.wait(30) and not errors, errors
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors


def test_a_busy_engine_whose_health_times_out_stays_ready_and_nothing_is_counted(sim):
    row = row_of(sim)
    port = sim.recipe.spec["roles"]["single"]["port"]
    assert row.health_answered_at == row.ready_at is not None

    with generating(port):
        for _ in range(3):  # as many as CEILING_LIVENESS_FAILURES: once counted, the third would fail it
            began = time.monotonic()
            deployment_check(deployment_id=sim.pk)
            took = time.monotonic() - began
            row.refresh_from_db()
            seen = BUSY.fullmatch(row.probe_detail)
            assert seen, row.probe_detail
            assert (row.status, row.probe_failures) == (ProcessStatus.READY, 0)
            cpu, waited = float(seen["cpu"]), float(seen["waited"])
            # The sim's /health spins on its one serving thread: more than an idle loop's CPU, and
            # never more than the probe's wall time.
            assert LIVENESS_BUSY_CPU_S < cpu <= waited + 0.1, row.probe_detail
            assert HTTP_TIMEOUT_S <= waited <= took + 0.05  # the probe kept its 2 s timeout
            assert float(seen["silent"]) == pytest.approx((row.last_probe_at - row.ready_at).total_seconds(), abs=0.2)

    # The first busy probe went to the timeline; the next two only updated the detail.
    (busy,) = liveness_events(sim)
    assert BUSY.fullmatch(busy.removeprefix("single: ")), busy
    sim.refresh_from_db()
    assert sim.status == "ready"

    # The generation abandoned, /health answers again: the silence ends on the timeline.
    wait_for(lambda: deployment_check(deployment_id=sim.pk) or row_of(sim).probe_detail.endswith("answered 200"),
             timeout_s=30, what="/health to answer again")
    row.refresh_from_db()
    assert (row.status, row.probe_failures) == (ProcessStatus.READY, 0)
    assert row.health_answered_at == row.last_probe_at
    again = liveness_events(sim)[-1]
    seen = re.fullmatch(rf"single: answered again, (\d+\.\d) s after its last answer "
                        rf"\(http://127\.0\.0\.1:{port}/health answered 200\)", again)
    assert seen, again
    assert float(seen[1]) == pytest.approx((row.health_answered_at - row.ready_at).total_seconds(), abs=0.2)


def test_a_busy_engine_silent_for_longer_than_the_grace_counts_as_failing(sim, settings):
    port = sim.recipe.spec["roles"]["single"]["port"]
    settings.CEILING_LIVENESS_BUSY_GRACE_S = 1.0

    with generating(port):
        deployment_check(deployment_id=sim.pk)

    row = row_of(sim)
    assert (row.status, row.probe_failures) == (ProcessStatus.READY, 1)
    seen = re.fullmatch(
        rf"http://127\.0\.0\.1:{port}/health did not answer within 2\.0 s \(ReadTimeout\); the process is busy "
        r"\((\d+\.\d\d) s of CPU in the (\d+\.\d) s probe\) but has not answered for (\d+\.\d) s, longer than the "
        r"1 s a busy process is given \(CEILING_LIVENESS_BUSY_GRACE_S\): counted as a failure", row.probe_detail)
    assert seen, row.probe_detail
    assert float(seen[1]) > LIVENESS_BUSY_CPU_S and float(seen[3]) > 1.0
    assert liveness_events(sim) == [f"single: failed (1/3): {row.probe_detail}"]


def test_a_stopped_engine_whose_health_times_out_is_hung_and_counts(sim):
    row = row_of(sim)
    port = sim.recipe.spec["roles"]["single"]["port"]
    os.kill(row.pid, signal.SIGSTOP)
    wait_for(lambda: proc_stat(row.pid).state == "T", timeout_s=5, what="the engine to stop")

    deployment_check(deployment_id=sim.pk)

    row.refresh_from_db()
    assert (row.status, row.probe_failures) == (ProcessStatus.READY, 1)
    seen = re.fullmatch(rf"http://127\.0\.0\.1:{port}/health did not answer within 2\.0 s \(ReadTimeout\) and the "
                        r"process used 0\.00 s of CPU in the (\d+\.\d) s probe: no progress \(hung\?\), counted as a "
                        r"failure", row.probe_detail)
    assert seen, row.probe_detail
    assert liveness_events(sim) == [f"single: failed (1/3): {row.probe_detail}"]


def test_the_tree_cpu_counts_children_also_after_they_were_reaped(tmp_path):
    # A parent that sleeps while its child computes for 0.5 s, then waits for it and sleeps on.
    script = ("import subprocess, sys, time\n"
              "time.sleep(0.5)\n"
              "child = subprocess.Popen([sys.executable, '-c', "
              "'import time\\nend = time.process_time() + 0.5\\nwhile time.process_time() < end: pass'])\n"
              "child.wait()\n"
              "print('reaped', flush=True)\n"
              "time.sleep(30)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.3)  # the interpreter has started
        start = proc_stat(parent.pid).start_ticks
        before = proc_tree_cpu_s(parent.pid, start)
        assert parent.stdout.readline() == "reaped\n"
        after = proc_tree_cpu_s(parent.pid, start)
        assert before is not None and after is not None
        # The child's 0.5 s of CPU (and its interpreter's start-up) now sit in the parent's cutime.
        assert 0.5 <= after - before < 2.0, (before, after)
        assert proc_tree_cpu_s(parent.pid, start + 1) is None  # another process than the one started then
    finally:
        parent.kill()
        parent.wait(timeout=10)
    assert proc_tree_cpu_s(parent.pid, start) is None


def test_the_busy_grace_is_counted_from_the_last_answer():
    timed_out = "http://127.0.0.1:31000/health did not answer within 2.0 s (ReadTimeout)"

    within = liveness_timeout_verdict(detail=timed_out, cpu_s=1.93, waited_s=2.04, unanswered_s=600.0, grace_s=600.0)
    beyond = liveness_timeout_verdict(detail=timed_out, cpu_s=1.93, waited_s=2.04, unanswered_s=600.1, grace_s=600.0)
    idle = liveness_timeout_verdict(detail=timed_out, cpu_s=0.05, waited_s=2.01, unanswered_s=12.0, grace_s=600.0)
    gone = liveness_timeout_verdict(detail=timed_out, cpu_s=None, waited_s=2.01, unanswered_s=12.0, grace_s=600.0)

    assert within == ("busy", f"{timed_out} while the process used 1.93 s of CPU in the 2.0 s probe: busy, not counted "
                              "as a failure (no answer for 600.0 s; a busy process is given 600 s)")
    assert beyond == ("unhealthy", f"{timed_out}; the process is busy (1.93 s of CPU in the 2.0 s probe) but has not "
                                   "answered for 600.1 s, longer than the 600 s a busy process is given "
                                   "(CEILING_LIVENESS_BUSY_GRACE_S): counted as a failure")
    assert idle == ("unhealthy", f"{timed_out} and the process used 0.05 s of CPU in the 2.0 s probe: no progress "
                                 "(hung?), counted as a failure")
    assert gone == ("unhealthy", f"{timed_out}, and the process ended meanwhile")
