"""A node's GPU count says why it is 0 or unknown: NVML not available (with NVML's reason), NVML
found none, or the node has not reported yet; the node pages, the API and the wall say the same.
NUMA memory comes from each node's sysfs ``meminfo``, not from ``/proc/meminfo``."""
from __future__ import annotations

import dataclasses

import pynvml
import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from deployments.discovery import NVML_NOT_INSTALLED, discover_node, read_nvml
from deployments.models import Node
from deployments.nodes import node_gpu_status, node_register, seed_node_facts
from deployments.tests.factories import GIB, cpu_node_create
from deployments.tests.test_discovery import CPUONLY, H200X2, CapturedNvml, h200_nvml, no_tools
from deployments.topology import NodeFacts, NumaFacts


def _library_missing() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        return True
    pynvml.nvmlShutdown()
    return False


# --- discovery records NVML's status --------------------------------------------------------


def test_discovery_records_why_nvml_gave_no_gpus_on_this_host():
    if not _library_missing():
        pytest.skip("this host has the NVML library")
    assert read_nvml(nvml=pynvml) == ([], "", "", "NVML Shared Library Not Found")

    facts = discover_node(name="x", sysfs_root=CPUONLY / "sys", nvml=pynvml, which=no_tools, hostname="x")

    assert facts.gpus == []
    assert facts.nvml_status == "NVML Shared Library Not Found"
    assert facts.to_dict()["nvml_status"] == "NVML Shared Library Not Found"


def test_discovery_records_a_driver_that_is_not_loaded():
    nvml = CapturedNvml(h200_nvml().gpus, init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    facts = discover_node(name="h200x2", sysfs_root=H200X2 / "sys", nvml=nvml, which=no_tools)

    assert facts.gpus == []
    assert facts.nvml_status == "Driver Not Loaded"


def test_discovery_records_ok_when_nvml_counts_no_gpu():
    facts = discover_node(name="x", sysfs_root=CPUONLY / "sys", nvml=CapturedNvml([], driver="580.95.05", cuda=13000),
                          which=no_tools)

    assert facts.gpus == []
    assert facts.nvml_status == "ok"
    assert (facts.driver_version, facts.cuda_version) == ("580.95.05", "13.0")


def test_discovery_records_ok_with_gpus_and_nothing_for_an_nvidia_smi_capture():
    facts = discover_node(name="h200x2", sysfs_root=H200X2 / "sys", nvml=h200_nvml(), which=no_tools)
    assert (len(facts.gpus), facts.nvml_status) == (2, "ok")

    xml = (H200X2 / "nvidia-smi-q.xml").read_text()
    captured = discover_node(name="h200x2", sysfs_root=H200X2 / "sys", nvidia_smi_xml=xml, which=no_tools)
    assert (len(captured.gpus), captured.nvml_status) == (2, None)


def test_read_nvml_names_a_missing_or_absent_library():
    assert read_nvml(nvml=None) == ([], "", "", "no NVML library given")
    assert NVML_NOT_INSTALLED == "pynvml is not installed (PyPI nvidia-ml-py)"


def test_nvml_status_survives_the_round_trip_through_a_dict():
    facts = NodeFacts(name="a", nvml_status="Driver Not Loaded")
    assert NodeFacts.from_dict(facts.to_dict()).nvml_status == "Driver Not Loaded"
    assert NodeFacts.from_dict({"name": "a"}).nvml_status is None
    assert NodeFacts.from_dict({"name": "a", "nvml_status": ""}).nvml_status is None


# --- NUMA memory per node -------------------------------------------------------------------


def test_numa_memory_comes_from_each_nodes_sysfs_meminfo_not_proc_meminfo(tmp_path):
    sys_root = tmp_path / "sys"
    (sys_root / "devices" / "system" / "cpu").mkdir(parents=True)
    (sys_root / "devices" / "system" / "cpu" / "online").write_text("0-7\n")
    for index, (cpus, kib) in enumerate((("0-3", 131_072_000), ("4-7", 65_536_000))):
        node_dir = sys_root / "devices" / "system" / "node" / f"node{index}"
        node_dir.mkdir(parents=True)
        (node_dir / "cpulist").write_text(cpus + "\n")
        (node_dir / "meminfo").write_text(
            f"Node {index} MemTotal:       {kib} kB\nNode {index} MemFree:        1000 kB\n")
    proc_root = tmp_path / "proc"
    proc_root.mkdir()
    (proc_root / "meminfo").write_text("MemTotal:       999 kB\n")

    facts = discover_node(name="two-numa", sysfs_root=sys_root, procfs_root=proc_root, nvml=None, which=no_tools)

    assert facts.numa_nodes == [
        NumaFacts(index=0, cpus=(0, 1, 2, 3), memory_total_bytes=131_072_000 * 1024),
        NumaFacts(index=1, cpus=(4, 5, 6, 7), memory_total_bytes=65_536_000 * 1024),
    ]
    assert facts.memory_total_bytes == (131_072_000 + 65_536_000) * 1024


# --- pages, API and wall say the same ------------------------------------------------------


def _register(name: str, *, nvml_status: str | None) -> Node:
    return node_register(facts=NodeFacts(
        name=name, hostname=name, cpu_count=2, memory_total_bytes=4 * GIB,
        numa_nodes=[NumaFacts(index=0, cpus=(0, 1), memory_total_bytes=4 * GIB)], nvml_status=nvml_status))


@pytest.fixture
def nodes(db):
    return {
        "nodriver": _register("nodriver", nvml_status="NVML Shared Library Not Found"),
        "nonefound": _register("nonefound", nvml_status="ok"),
        "capture": _register("capture", nvml_status=None),
        "seed": node_register(facts=seed_node_facts()),
        "partial": node_register(facts=dataclasses.replace(
            seed_node_facts(), name="partial", nvml_status="GPU 1: nvmlDeviceGetName failed: Unknown Error")),
        "fresh": cpu_node_create(name="fresh"),  # a row no discovery ever filled
    }


EXPECTED = {
    "nodriver": (0, "nvml_unavailable", "NVML Shared Library Not Found",
                 "0 GPUs — NVML not available: NVML Shared Library Not Found"),
    "nonefound": (0, "none_found", None, "0 GPUs (NVML found none)"),
    "capture": (0, "none_recorded", None, "0 GPUs (no NVML status recorded)"),
    "seed-8gpu": (8, "found", None, "8 GPUs"),
    "partial": (8, "found", "GPU 1: nvmlDeviceGetName failed: Unknown Error",
                "8 GPUs (some NVML queries failed: GPU 1: nvmlDeviceGetName failed: Unknown Error)"),
    "fresh": (None, "not_reported", None, "unknown (not reported yet)"),
}


def test_node_gpu_status_of_each_kind(nodes):
    for node in Node.objects.prefetch_related("gpus"):
        found = node_gpu_status(node)
        assert (found["count"], found["status"], found["reason"], found["text"]) == EXPECTED[node.name], node.name


def test_the_api_gives_the_gpu_count_status_reason_and_summary(nodes, viewer_api):
    body = viewer_api.get("/api/nodes/").json()
    rows = body["results"] if isinstance(body, dict) else body
    got = {r["name"]: (r["gpu_count"], r["gpu_status"], r["gpu_status_reason"], r["gpu_summary"]) for r in rows}
    assert got == EXPECTED
    one = viewer_api.get("/api/nodes/nodriver/").json()
    assert one["gpus"] == [] and one["gpu_count"] == 0 and one["driver_version"] is None
    assert len(viewer_api.get("/api/nodes/seed-8gpu/").json()["gpus"]) == 8


def test_the_node_page_states_the_gpu_count_and_why(nodes, viewer):
    client = Client()
    client.force_login(viewer)
    for name, (_, status, _, text) in EXPECTED.items():
        html = client.get(reverse("deployments:node-detail", args=[name])).content.decode()
        assert f'<dd id="gpu-status" data-gpu-status="{status}">{text}</dd>' in html, name
    html = client.get(reverse("deployments:node-detail", args=["nodriver"])).content.decode()
    assert "0 GPUs — NVML not available: NVML Shared Library Not Found. CPU-only engines" in html
    assert "No GPU on this node." in html


def test_the_node_list_states_the_gpu_count_and_why(nodes, viewer):
    client = Client()
    client.force_login(viewer)
    html = client.get(reverse("deployments:node-list")).content.decode()
    assert ('data-gpu-status="nvml_unavailable" title="NVML not available: NVML Shared Library Not Found">'
            "0 GPUs — NVML not available: NVML Shared Library Not Found</td>") in html
    assert 'data-gpu-status="none_found">0 GPUs (NVML found none)</td>' in html
    assert 'data-gpu-status="found">8</td>' in html
    assert 'data-gpu-status="not_reported">unknown (not reported yet)</td>' in html


def test_the_wall_tile_states_the_gpu_count_and_why(nodes, viewer):
    client = Client()
    client.force_login(viewer)
    Node.objects.filter(name="nodriver").update(agent_heartbeat_at=timezone.now())
    html = client.get(reverse("deployments:wall-tiles")).content.decode()
    # Online: the full tile's line; offline and never sampled: the compact summary.
    assert ('<p class="wall-no-gpu" data-gpu-status="nvml_unavailable">'
            "0 GPUs — NVML not available: NVML Shared Library Not Found · 2 CPUs</p>") in html
    assert '<span class="wall-node-summary">0 GPUs (NVML found none) · 2 CPUs · 4.0 GiB host memory</span>' in html
    assert '<span class="wall-node-summary">8 GPUs · 95.6 GiB each · 64 CPUs · 503.3 GiB host memory</span>' in html
    assert '<span class="wall-node-summary">unknown (not reported yet) · 8 CPUs · 16.0 GiB host memory</span>' in html
    assert '<span class="wall-node-summary">0 GPUs (no NVML status recorded) · 2 CPUs · 4.0 GiB host memory</span>' in html
