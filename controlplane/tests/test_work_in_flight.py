"""``manage.py work_in_flight``: the sweeps the control worker runs and the kernel jobs a node's
agent runs, which ``scripts/services.py start`` leaves running rather than cut off."""
from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from benchmarks.models import BenchmarkSweep
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.models import Node
from deployments.tests.factories import cpu_node_create
from kernels.models import KernelJob, KernelPackage

pytestmark = pytest.mark.django_db


def _in_flight(*args: str) -> dict:
    out = io.StringIO()
    call_command("work_in_flight", *args, stdout=out)
    return json.loads(out.getvalue())


def test_it_lists_running_and_waiting_sweeps_and_the_nodes_running_kernel_jobs() -> None:
    sweeps = {}
    for i, status in enumerate(("pending", "waiting", "running", "done", "failed", "cancelled")):
        deployment = sim_deployment_create(base_url=f"http://127.0.0.1:{9 + i}", recipe_name=f"sim-{status}")
        sweeps[status] = BenchmarkSweep.objects.create(deployment=deployment, grid={"concurrency": [1]},
                                                       status=status).pk
    package = KernelPackage.objects.create(name="toy", title="toy", language="triton", source_hash="0" * 64, path="/x")
    # One job at a time holds a node: local builds, gpu-box benchmarks, idle-box's job waits.
    local = Node.objects.get(name="local")   # the deployments' node
    nodes = {"local": local, "gpu-box": cpu_node_create(name="gpu-box"), "idle-box": cpu_node_create(name="idle-box")}
    jobs = {}
    for name, status in (("local", "building"), ("gpu-box", "benchmarking"), ("idle-box", "pending")):
        for st in ("done", status):
            jobs[(name, st)] = KernelJob.objects.create(package=package, target_cc="9.0", status=st, node=nodes[name]).pk

    assert _in_flight() == {
        "worker": [f"sweep #{sweeps['waiting']} (waiting)", f"sweep #{sweeps['running']} (running)"],
        "agent": [f"kernel job #{jobs[('local', 'building')]} (building)"],
    }
    assert _in_flight("--node", "gpu-box")["agent"] == [f"kernel job #{jobs[('gpu-box', 'benchmarking')]} (benchmarking)"]
    assert _in_flight("--node", "idle-box")["agent"] == []


def test_nothing_in_flight_is_two_empty_lists() -> None:
    assert _in_flight() == {"worker": [], "agent": []}
