"""A node's GPU count says how it was measured and why it is 0 or unknown: NVML found none; NVML
not available (with NVML's reason) and the PCI bus in sysfs lists N NVIDIA GPUs, none, or could
not be read; or the node has not reported yet. The node pages, the API and the wall say the same.
NUMA memory comes from each node's sysfs ``meminfo``, not from ``/proc/meminfo``."""
from __future__ import annotations

import dataclasses
import re

import pynvml
import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from deployments.discovery import (
    GPU_COUNT_FROM_NVIDIA_SMI_XML,
    GPU_COUNT_FROM_NVML,
    GPU_COUNT_FROM_SYSFS_PCI,
    NVML_NOT_INSTALLED,
    count_pci_nvidia_gpus,
    discover_node,
    read_nvml,
)
from deployments.models import Node
from deployments.nodes import node_gpu_status, node_register, seed_node_facts
from deployments.tests.factories import GIB, cpu_node_create
from deployments.tests.test_discovery import CPUONLY, H200X2, CapturedNvml, h200_nvml, no_tools
from deployments.topology import NodeFacts, NumaFacts, node_facts_from_row


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
    # The fixture's only PCI device is an NVMe controller: 0 is measured, not assumed.
    assert (facts.pci_gpu_count, facts.gpu_count_source) == (0, GPU_COUNT_FROM_SYSFS_PCI)


def test_discovery_records_a_driver_that_is_not_loaded():
    nvml = CapturedNvml(h200_nvml().gpus, init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    facts = discover_node(name="h200x2", sysfs_root=H200X2 / "sys", nvml=nvml, which=no_tools)

    assert facts.gpus == []
    assert facts.nvml_status == "Driver Not Loaded"
    # Both H200s are still on the PCI bus; they are counted, not listed as usable GPUs.
    assert (facts.pci_gpu_count, facts.gpu_count_source) == (2, GPU_COUNT_FROM_SYSFS_PCI)


def test_discovery_records_ok_when_nvml_counts_no_gpu():
    facts = discover_node(name="x", sysfs_root=CPUONLY / "sys", nvml=CapturedNvml([], driver="580.95.05", cuda=13000),
                          which=no_tools)

    assert facts.gpus == []
    assert facts.nvml_status == "ok"
    assert (facts.driver_version, facts.cuda_version) == ("580.95.05", "13.0")
    assert (facts.pci_gpu_count, facts.gpu_count_source) == (None, GPU_COUNT_FROM_NVML)


def test_discovery_records_ok_with_gpus_and_nothing_for_an_nvidia_smi_capture():
    facts = discover_node(name="h200x2", sysfs_root=H200X2 / "sys", nvml=h200_nvml(), which=no_tools)
    assert (len(facts.gpus), facts.nvml_status, facts.pci_gpu_count, facts.gpu_count_source) == (
        2, "ok", None, GPU_COUNT_FROM_NVML)

    xml = (H200X2 / "nvidia-smi-q.xml").read_text()
    captured = discover_node(name="h200x2", sysfs_root=H200X2 / "sys", nvidia_smi_xml=xml, which=no_tools)
    assert (len(captured.gpus), captured.nvml_status, captured.pci_gpu_count, captured.gpu_count_source) == (
        2, None, None, GPU_COUNT_FROM_NVIDIA_SMI_XML)


def test_read_nvml_names_a_missing_or_absent_library():
    assert read_nvml(nvml=None) == ([], "", "", "no NVML library given")
    assert NVML_NOT_INSTALLED == "pynvml is not installed (PyPI nvidia-ml-py)"


def test_nvml_status_survives_the_round_trip_through_a_dict():
    facts = NodeFacts(name="a", nvml_status="Driver Not Loaded", pci_gpu_count=2,
                      gpu_count_source=GPU_COUNT_FROM_SYSFS_PCI)
    back = NodeFacts.from_dict(facts.to_dict())
    assert (back.nvml_status, back.pci_gpu_count, back.gpu_count_source) == (
        "Driver Not Loaded", 2, GPU_COUNT_FROM_SYSFS_PCI)
    old = NodeFacts.from_dict({"name": "a"})
    assert (old.nvml_status, old.pci_gpu_count, old.gpu_count_source) == (None, None, None)
    assert NodeFacts.from_dict({"name": "a", "nvml_status": ""}).nvml_status is None
    assert NodeFacts.from_dict({"name": "a", "pci_gpu_count": "2"}).pci_gpu_count is None
    assert NodeFacts.from_dict({"name": "a", "pci_gpu_count": -1}).pci_gpu_count is None


# --- the PCI bus in sysfs when NVML gives no count ------------------------------------------


def _pci_device(sys_root, address: str, vendor: str, pci_class: str) -> None:
    device = sys_root / "bus" / "pci" / "devices" / address
    device.mkdir(parents=True)
    (device / "vendor").write_text(vendor + "\n")
    (device / "class").write_text(pci_class + "\n")


def _fake_pci_host(tmp_path):
    """A host whose PCI bus holds an NVIDIA VGA controller, an NVIDIA 3D controller with its HDMI
    audio function, an NVIDIA bridge, an Intel VGA controller, an AMD display controller and a
    Mellanox NIC: two of them are NVIDIA GPUs."""
    sys_root = tmp_path / "sys"
    (sys_root / "devices" / "system" / "cpu").mkdir(parents=True)
    (sys_root / "devices" / "system" / "cpu" / "online").write_text("0-3\n")
    _pci_device(sys_root, "0000:00:02.0", "0x8086", "0x030000")  # Intel iGPU
    _pci_device(sys_root, "0000:01:00.0", "0x10de", "0x030000")  # NVIDIA VGA-compatible
    _pci_device(sys_root, "0000:01:00.1", "0x10de", "0x040300")  # its HDMI audio
    _pci_device(sys_root, "0000:02:00.0", "0x10de", "0x068000")  # NVIDIA bridge
    _pci_device(sys_root, "0000:41:00.0", "0x10de", "0x030200")  # NVIDIA 3D controller (H100)
    _pci_device(sys_root, "0000:42:00.0", "0x1002", "0x038000")  # AMD display controller
    _pci_device(sys_root, "0000:43:00.0", "0x15b3", "0x020000")  # Mellanox NIC
    return sys_root


def test_it_counts_nvidia_display_and_3d_controllers_on_the_pci_bus(tmp_path):
    sys_root = _fake_pci_host(tmp_path)
    assert count_pci_nvidia_gpus(sysfs_root=sys_root) == 2

    nvml = CapturedNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    facts = discover_node(name="pci", sysfs_root=sys_root, nvml=nvml, which=no_tools)

    assert facts.gpus == []
    assert (facts.nvml_status, facts.pci_gpu_count, facts.gpu_count_source) == (
        "NVML Shared Library Not Found", 2, GPU_COUNT_FROM_SYSFS_PCI)


def test_the_pci_bus_is_not_read_when_nvml_answers(tmp_path):
    sys_root = _fake_pci_host(tmp_path)
    facts = discover_node(name="pci", sysfs_root=sys_root, nvml=CapturedNvml([]), which=no_tools)
    assert (facts.nvml_status, facts.pci_gpu_count, facts.gpu_count_source) == ("ok", None, GPU_COUNT_FROM_NVML)


def test_an_unreadable_pci_bus_leaves_the_count_unknown(tmp_path, caplog):
    nvml = CapturedNvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    sys_root = _fake_pci_host(tmp_path)
    (sys_root / "bus" / "pci" / "devices" / "0000:41:00.0" / "class").write_text("display\n")

    facts = discover_node(name="pci", sysfs_root=sys_root, nvml=nvml, which=no_tools)

    assert (facts.nvml_status, facts.pci_gpu_count, facts.gpu_count_source) == ("Driver Not Loaded", None, None)
    assert "0000:41:00.0/class: expected a hexadecimal number, got 'display'" in caplog.text

    # No bus/pci/devices at all (a container without /sys/bus): unknown too, never 0.
    bare = tmp_path / "bare"
    (bare / "devices" / "system" / "cpu").mkdir(parents=True)
    (bare / "devices" / "system" / "cpu" / "online").write_text("0\n")
    facts = discover_node(name="bare", sysfs_root=bare, nvml=nvml, which=no_tools)
    assert (facts.pci_gpu_count, facts.gpu_count_source) == (None, None)


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


def _register(name: str, *, nvml_status: str | None, pci_gpu_count: int | None = None) -> Node:
    return node_register(facts=NodeFacts(
        name=name, hostname=name, cpu_count=2, memory_total_bytes=4 * GIB,
        numa_nodes=[NumaFacts(index=0, cpus=(0, 1), memory_total_bytes=4 * GIB)], nvml_status=nvml_status,
        pci_gpu_count=pci_gpu_count, gpu_count_source=GPU_COUNT_FROM_SYSFS_PCI if pci_gpu_count is not None else None))


@pytest.fixture
def nodes(db):
    return {
        "nodriver": _register("nodriver", nvml_status="NVML Shared Library Not Found", pci_gpu_count=0),
        "brokendriver": _register("brokendriver", nvml_status="Driver Not Loaded", pci_gpu_count=2),
        "onebroken": _register("onebroken", nvml_status="Driver Not Loaded", pci_gpu_count=1),
        "unknown": _register("unknown", nvml_status="NVML Shared Library Not Found"),
        "nonefound": _register("nonefound", nvml_status="ok"),
        "capture": _register("capture", nvml_status=None),
        "seed": node_register(facts=seed_node_facts()),
        "partial": node_register(facts=dataclasses.replace(
            seed_node_facts(), name="partial", nvml_status="GPU 1: nvmlDeviceGetName failed: Unknown Error")),
        "fresh": cpu_node_create(name="fresh"),  # a row no discovery ever filled
    }


EXPECTED = {
    "nodriver": (0, "none_on_pci", "NVML Shared Library Not Found",
                 "0 GPUs (no NVIDIA PCI device; NVML not available: NVML Shared Library Not Found)"),
    "brokendriver": (2, "nvml_unavailable", "Driver Not Loaded",
                     "2 NVIDIA GPUs on the PCI bus, not usable: NVML not available: Driver Not Loaded"),
    "onebroken": (1, "nvml_unavailable", "Driver Not Loaded",
                  "1 NVIDIA GPU on the PCI bus, not usable: NVML not available: Driver Not Loaded"),
    "unknown": (None, "count_unknown", "NVML Shared Library Not Found",
                "GPU count unknown — NVML not available: NVML Shared Library Not Found"),
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


def test_a_registered_node_keeps_the_pci_count_and_its_source(nodes):
    facts = node_facts_from_row(Node.objects.get(name="brokendriver"))
    assert (facts.gpus, facts.pci_gpu_count, facts.gpu_count_source) == ([], 2, GPU_COUNT_FROM_SYSFS_PCI)


#: The node page's empty-GPU lines: the GPUs section's, then the live panel's (no agent of these
#: nodes was ever seen, so it says nothing is sampled yet). Where NVML gave a reason, only the
#: facts' GPUs line says it; these lines refer to it.
EMPTY_LINES = {
    "nodriver": ("No usable GPU: NVML is not available (the GPUs line above says why). CPU-only engines",
                 "No GPU on this node. Nothing is sampled yet"),
    "brokendriver": ("No usable GPU: NVML is not available (the GPUs line above says why). CPU-only engines",
                     "No usable GPU: NVML is not available. Nothing is sampled yet"),
    "unknown": ("No usable GPU: NVML is not available (the GPUs line above says why). CPU-only engines",
                "GPU count unknown. Nothing is sampled yet"),
    "nonefound": ("0 GPUs (NVML found none). CPU-only engines", "No GPU on this node. Nothing is sampled yet"),
    "fresh": ("unknown (not reported yet). CPU-only engines", "No GPU reported yet. Nothing is sampled yet"),
}


def _page_text(html: str) -> str:
    """The text a reader sees of ``html``: tags (and so their attributes) dropped."""
    return re.sub(r"<[^>]*>", " ", html)


def test_the_node_page_states_the_gpu_count_and_why(nodes, viewer):
    client = Client()
    client.force_login(viewer)
    for name, (_, status, _, text) in EXPECTED.items():
        html = client.get(reverse("deployments:node-detail", args=[name])).content.decode()
        assert f'<dd id="gpu-status" data-gpu-status="{status}">{text}</dd>' in html, name
    for name, (facts_line, live_line) in EMPTY_LINES.items():
        html = client.get(reverse("deployments:node-detail", args=[name])).content.decode()
        assert facts_line in html and live_line in html, name
        if name in ("brokendriver", "unknown"):
            assert "No GPU on this node" not in html, name


def test_the_node_page_gives_nvmls_reason_once(nodes, viewer):
    """NVML's reason is in the GPUs line only; the live NVML notice is handed the reason shown
    there (so it can refer to it) and nothing else on the page repeats it."""
    client = Client()
    client.force_login(viewer)
    for name, (_, _, reason, _) in EXPECTED.items():
        html = client.get(reverse("deployments:node-detail", args=[name])).content.decode()
        assert f'data-f="nvml" data-reason-shown="{reason or ""}"' in html, name
        if reason:
            assert _page_text(html).count(reason) == 1, name


def test_the_node_list_states_the_gpu_count_and_why(nodes, viewer):
    client = Client()
    client.force_login(viewer)
    html = client.get(reverse("deployments:node-list")).content.decode()
    assert ('data-gpu-status="none_on_pci" title="NVML not available: NVML Shared Library Not Found">'
            "0 GPUs (no NVIDIA PCI device; NVML not available: NVML Shared Library Not Found)</td>") in html
    assert ('data-gpu-status="nvml_unavailable" title="NVML not available: Driver Not Loaded">'
            "2 NVIDIA GPUs on the PCI bus, not usable: NVML not available: Driver Not Loaded</td>") in html
    assert ('data-gpu-status="count_unknown" title="NVML not available: NVML Shared Library Not Found">'
            "GPU count unknown — NVML not available: NVML Shared Library Not Found</td>") in html
    assert 'data-gpu-status="none_found">0 GPUs (NVML found none)</td>' in html
    assert 'data-gpu-status="found">8</td>' in html
    assert 'data-gpu-status="not_reported">unknown (not reported yet)</td>' in html


def test_the_wall_tile_states_the_gpu_count_and_why_once(nodes, viewer):
    client = Client()
    client.force_login(viewer)
    Node.objects.filter(name__in=["nodriver", "brokendriver", "partial"]).update(agent_heartbeat_at=timezone.now())
    html = client.get(reverse("deployments:wall-tiles")).content.decode()
    # Online: the full tile's line; offline and never sampled: the compact summary.
    assert ('<p class="wall-no-gpu" data-gpu-status="none_on_pci">'
            "0 GPUs (no NVIDIA PCI device; NVML not available: NVML Shared Library Not Found) · 2 CPUs</p>") in html
    assert ('<p class="wall-no-gpu" data-gpu-status="nvml_unavailable">'
            "2 NVIDIA GPUs on the PCI bus, not usable: NVML not available: Driver Not Loaded · 2 CPUs</p>") in html
    assert ('<span class="wall-node-summary">GPU count unknown — NVML not available: NVML Shared Library Not Found'
            " · 2 CPUs · 4.0 GiB host memory</span>") in html
    assert '<span class="wall-node-summary">0 GPUs (NVML found none) · 2 CPUs · 4.0 GiB host memory</span>' in html
    assert '<span class="wall-node-summary">8 GPUs · 95.6 GiB each · 64 CPUs · 503.3 GiB host memory</span>' in html
    assert '<span class="wall-node-summary">GPUs unknown (not reported yet) · 8 CPUs · 16.0 GiB host memory</span>' in html
    assert '<span class="wall-node-summary">0 GPUs (no NVML status recorded) · 2 CPUs · 4.0 GiB host memory</span>' in html
    # NVML's reason is said once per tile: a tile without GPUs has no live NVML notice line beside
    # its summary; a tile with GPUs keeps it (the summary then carries no NVML reason).
    tiles = {name: html[html.index(f'data-node="{name}"'):] for name in ("nodriver", "brokendriver", "partial")}
    for name, tile in tiles.items():
        tile = tile[:tile.index("</article>")]
        assert ('data-f="nvml"' in tile) is (name == "partial"), name
        assert tile.count("NVML not available") == (0 if name == "partial" else 1), name
