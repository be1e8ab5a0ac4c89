"""Node registration, heartbeats, the seed machine's facts and ``manage.py discover_node``."""
from __future__ import annotations

import json
import os
from dataclasses import replace
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from controlplane.errors import InvalidInput, NotFound
from deployments.models import Gpu, Node, NumaNode
from deployments.nodes import node_heartbeat, node_local_register, node_register, seed_node_facts
from deployments.topology import NodeFacts, NumaFacts, node_facts_from_row

FIXTURES = Path(__file__).resolve().parent / "fixtures"
H200X2 = FIXTURES / "h200x2"


def _rows(node: Node) -> tuple[list[tuple], list[tuple]]:
    gpus = list(Gpu.objects.filter(node=node).order_by("index").values_list("pk", "index", "uuid", "numa_node"))
    numa = list(NumaNode.objects.filter(node=node).order_by("index").values_list("pk", "index", "cpus"))
    return gpus, numa


def test_it_loads_the_seed_machine():
    facts = seed_node_facts()

    assert facts.name == "seed-8gpu"
    assert len(facts.gpus) == 8
    assert {g.name for g in facts.gpus} == {"NVIDIA RTX PRO 6000 Blackwell Server Edition"}
    assert {g.compute_capability for g in facts.gpus} == {"12.0"}
    assert {g.memory_total_bytes for g in facts.gpus} == {97887 * 1024**2}
    assert [g.numa_node for g in facts.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert facts.numa(0).cpus == tuple(range(32))
    assert facts.numa(1).cpus == tuple(range(32, 64))
    assert facts.tools["numactl"] == "/usr/bin/numactl"
    assert facts.tools["nvcc"] == "/usr/local/cuda/bin/nvcc"


@pytest.mark.django_db
def test_it_registers_the_seed_machine():
    facts = seed_node_facts()

    node = node_register(facts=facts)

    node.refresh_from_db()
    assert node.name == "seed-8gpu"
    assert node.queue_name == "node.seed-8gpu"
    assert node.cpu_count == 64
    assert node.memory_total_bytes == facts.memory_total_bytes
    assert node.tools == facts.tools
    assert node.has_tool("numactl")
    assert (node.driver_version, node.cuda_version) == ("580.95.05", "13.0")
    assert node.topology == facts.to_dict()
    assert node.discovered_at is not None
    assert list(node.numa_nodes.values_list("index", "cpus")) == [(0, "0-31"), (1, "32-63")]
    assert list(node.gpus.values_list("index", "numa_node", "pci_bus_id")) == [
        (0, 0, "00000000:18:00.0"),
        (1, 0, "00000000:2A:00.0"),
        (2, 0, "00000000:3A:00.0"),
        (3, 0, "00000000:5D:00.0"),
        (4, 1, "00000000:9A:00.0"),
        (5, 1, "00000000:AB:00.0"),
        (6, 1, "00000000:BA:00.0"),
        (7, 1, "00000000:DB:00.0"),
    ]
    assert node_facts_from_row(node).to_dict() == facts.to_dict()


@pytest.mark.django_db
def test_it_registers_idempotently():
    facts = seed_node_facts()
    first = node_register(facts=facts)
    rows_before = _rows(first)
    discovered_before = Node.objects.get(pk=first.pk).discovered_at

    second = node_register(facts=facts)

    assert second.pk == first.pk
    assert Node.objects.count() == 1
    assert _rows(second) == rows_before
    assert Node.objects.get(pk=first.pk).discovered_at >= discovered_before


@pytest.mark.django_db
def test_it_removes_rows_of_gpus_and_numa_nodes_that_are_gone():
    facts = seed_node_facts()
    node = node_register(facts=facts)
    gpu_pks = dict(node.gpus.values_list("index", "pk"))

    smaller = replace(facts, gpus=facts.gpus[:4], numa_nodes=facts.numa_nodes[:1], cpu_count=32)
    node_register(facts=smaller)

    assert list(node.gpus.values_list("index", "pk")) == [(i, gpu_pks[i]) for i in range(4)]
    assert list(node.numa_nodes.values_list("index", flat=True)) == [0]
    assert Gpu.objects.count() == 4
    assert Node.objects.get(pk=node.pk).topology["gpus"][-1]["index"] == 3


@pytest.mark.django_db
def test_it_updates_a_gpu_whose_facts_changed():
    facts = seed_node_facts()
    node = node_register(facts=facts)
    swapped = replace(facts.gpus[7], uuid="GPU-00000000-0000-4000-8000-000000000007")

    node_register(facts=replace(facts, gpus=facts.gpus[:7] + [swapped]))

    assert node.gpus.get(index=7).uuid == "GPU-00000000-0000-4000-8000-000000000007"
    assert node.gpus.count() == 8


@pytest.mark.django_db
def test_it_refuses_inconsistent_facts():
    facts = seed_node_facts()

    with pytest.raises(InvalidInput) as bad_name:
        node_register(facts=replace(facts, name="Seed 8GPU"))
    with pytest.raises(InvalidInput) as duplicate:
        node_register(facts=replace(facts, gpus=facts.gpus + [facts.gpus[0]]))
    with pytest.raises(InvalidInput) as unknown_numa:
        node_register(facts=replace(facts, gpus=[replace(facts.gpus[0], numa_node=3)]))

    assert list(bad_name.value.errors) == ["name"]
    assert list(duplicate.value.errors) == ["gpus"]
    assert unknown_numa.value.errors == {
        "gpus.0.numa_node": ["NUMA node 3 is not one of this node's NUMA nodes [0, 1]"]
    }
    assert Node.objects.count() == 0


@pytest.mark.django_db
def test_it_records_a_heartbeat():
    node = node_register(facts=seed_node_facts())
    assert node.agent_online is False

    node_heartbeat(name="seed-8gpu", pid=4242)

    node.refresh_from_db()
    assert node.agent_pid == 4242
    assert node.agent_online is True
    assert abs((timezone.now() - node.agent_heartbeat_at).total_seconds()) < 5


@pytest.mark.django_db
def test_it_never_moves_a_heartbeat_backwards():
    node = node_register(facts=seed_node_facts())
    later = timezone.now() + timedelta(minutes=5)
    Node.objects.filter(pk=node.pk).update(agent_heartbeat_at=later, agent_pid=1)

    node_heartbeat(name="seed-8gpu", pid=2)

    node.refresh_from_db()
    assert (node.agent_heartbeat_at, node.agent_pid) == (later, 1)


@pytest.mark.django_db
def test_it_refuses_a_heartbeat_for_an_unknown_node():
    with pytest.raises(NotFound):
        node_heartbeat(name="nowhere", pid=1)


@pytest.mark.django_db
def test_it_registers_this_host(settings):
    settings.CEILING_NODE_NAME = "test-local"

    node = node_local_register()

    assert node.name == "test-local"
    assert node.queue_name == "node.test-local"
    assert node.cpu_count == os.cpu_count()
    assert node.numa_nodes.count() >= 1
    assert node.discovered_at is not None


def _capture_args() -> list[str]:
    return [
        "--sysfs-root", str(H200X2 / "sys"),
        "--nvidia-smi-xml", str(H200X2 / "nvidia-smi-q.xml"),
        "--topo", str(H200X2 / "topo.txt"),
    ]


@pytest.mark.django_db
def test_it_prints_and_registers_a_capture_as_json():
    out, err = StringIO(), StringIO()

    call_command("discover_node", "--name", "h200x2", "--json", "--register", *_capture_args(), stdout=out, stderr=err)

    printed = json.loads(out.getvalue())
    assert [g["memory_total_bytes"] for g in printed["gpus"]] == [150_754_820_096, 150_754_820_096]
    assert [g["numa_node"] for g in printed["gpus"]] == [0, 0]
    assert printed["numa_nodes"] == [{"index": 0, "cpus": "0-31", "memory_total_bytes": 4699 * 1024**2}]
    node = Node.objects.get(name="h200x2")
    assert list(node.gpus.values_list("name", "memory_total_bytes")) == [("NVIDIA H200", 150_754_820_096)] * 2
    assert "registered node h200x2" in err.getvalue()
    assert "queue node.h200x2" in err.getvalue()


@pytest.mark.django_db
def test_it_prints_a_table_without_registering():
    out = StringIO()

    call_command("discover_node", "--name", "h200x2", *_capture_args(), stdout=out)

    text = out.getvalue()
    assert "node h200x2" in text
    assert "0    NVIDIA H200  143771  -   00000000:00:06.0  0     0-31" in text
    assert Node.objects.count() == 0


@pytest.mark.django_db
def test_it_prints_a_cpu_only_host():
    out = StringIO()

    call_command("discover_node", "--name", "laptop", "--sysfs-root", str(FIXTURES / "cpuonly" / "sys"), stdout=out)

    assert "no GPUs (CPU-only node)" in out.getvalue()
    assert "0     0-7   15.5" in out.getvalue()


def test_it_reports_a_malformed_tree_as_a_command_error():
    with pytest.raises(CommandError, match=r"node1/cpulist: malformed CPU list '7-4'"):
        call_command("discover_node", "--sysfs-root", str(FIXTURES / "malformed" / "sys"), stdout=StringIO())


def test_it_round_trips_seed_facts_through_json():
    facts = seed_node_facts()

    assert NodeFacts.from_dict(json.loads(json.dumps(facts.to_dict()))) == facts
    assert facts.numa_nodes[0] == NumaFacts(index=0, cpus=tuple(range(32)), memory_total_bytes=263604308 * 1024)
