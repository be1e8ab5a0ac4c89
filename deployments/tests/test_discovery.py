"""Discovery against real sysfs fixture trees, real ``nvidia-smi`` captures and this host.

The GPU driver cannot run here, so NVML is replaced by :class:`CapturedNvml`, a small object
answering the same ``pynvml`` calls from GPU facts parsed out of a real ``nvidia-smi -q -x``
capture (or the seed machine's JSON). Everything else (sysfs trees, ``topo -m`` text, this
host's ``/sys``) is read for real.
"""
from __future__ import annotations

import csv
import os
import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from deployments.discovery import (
    TOOLS,
    DiscoveryError,
    TopoRow,
    discover_node,
    parse_nvidia_smi_topo,
    parse_nvidia_smi_xml,
    parse_nvidia_smi_xml_versions,
    read_nvml_gpus,
    sysfs_pci_address,
)
from deployments.nodes import seed_node_facts
from deployments.topology import GpuFacts, NumaFacts

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SEED8 = FIXTURES / "seed8"
H200X2 = FIXTURES / "h200x2"
CPUONLY = FIXTURES / "cpuonly"
MALFORMED = FIXTURES / "malformed"

H200_MEMORY_BYTES = 150_754_820_096  # 143771 MiB, as nvidia-smi reports each H200 in the capture
SEED_TOOLS = {"numactl": "/usr/bin/numactl", "nvcc": "/usr/local/cuda/bin/nvcc", "nvidia-smi": "/usr/bin/nvidia-smi"}


class CapturedNvml:
    """Answers the ``pynvml`` calls discovery makes from captured GPU facts.

    ``init_error`` is an NVML error code (``pynvml.NVML_ERROR_*``) that ``nvmlInit`` raises,
    to play a host whose driver is not loaded.
    """

    NVMLError = pynvml.NVMLError

    def __init__(self, gpus: list[GpuFacts], *, driver: str = "", cuda: int = 0, init_error: int | None = None):
        self.gpus = gpus
        self.driver = driver
        self.cuda = cuda
        self.init_error = init_error
        self.initialised = False

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def _check(self) -> None:
        if not self.initialised:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check()
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check()
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> GpuFacts:
        self._check()
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[index]

    def nvmlDeviceGetName(self, handle: GpuFacts) -> str:
        return handle.name

    def nvmlDeviceGetUUID(self, handle: GpuFacts) -> str:
        return handle.uuid

    def nvmlDeviceGetMemoryInfo(self, handle: GpuFacts) -> SimpleNamespace:
        return SimpleNamespace(total=handle.memory_total_bytes, free=handle.memory_total_bytes, used=0)

    def nvmlDeviceGetPciInfo(self, handle: GpuFacts) -> SimpleNamespace:
        return SimpleNamespace(busId=handle.pci_bus_id)

    def nvmlDeviceGetCudaComputeCapability(self, handle: GpuFacts) -> tuple[int, int]:
        if not handle.compute_capability:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        major, minor = handle.compute_capability.split(".")
        return int(major), int(minor)


def h200_nvml() -> CapturedNvml:
    """NVML as the captured 2x H200 host answered: facts from ``nvidia-smi -q -x``, compute
    capability from the ``--query-gpu ... compute_cap`` CSV (the XML does not carry it)."""
    xml = (H200X2 / "nvidia-smi-q.xml").read_text()
    with (H200X2 / "query-gpu.csv").open() as f:
        rows = list(csv.DictReader(f, skipinitialspace=True))
    caps = {int(r["index"]): r["compute_cap"] for r in rows}
    gpus = [replace(g, compute_capability=caps[g.index]) for g in parse_nvidia_smi_xml(xml)]
    return CapturedNvml(gpus, driver="580.159.04", cuda=13000)


def seed_nvml() -> CapturedNvml:
    """NVML as the seed machine answers: only the fields NVML itself reports."""
    seed = seed_node_facts()
    gpus = [
        GpuFacts(
            index=g.index,
            uuid=g.uuid,
            name=g.name,
            memory_total_bytes=g.memory_total_bytes,
            pci_bus_id=g.pci_bus_id,
            compute_capability=g.compute_capability,
        )
        for g in seed.gpus
    ]
    return CapturedNvml(gpus, driver=seed.driver_version, cuda=13000)


def seed_which(name: str) -> str | None:
    return SEED_TOOLS.get(name)


def no_tools(name: str) -> str | None:
    return None


# --- seed machine ---------------------------------------------------------------------------


def test_it_maps_seed_gpus_to_numa_nodes_from_sysfs():
    facts = discover_node(name="seed-8gpu", sysfs_root=SEED8 / "sys", nvml=seed_nvml(), which=seed_which)

    assert [g.index for g in facts.gpus] == list(range(8))
    assert [g.numa_node for g in facts.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [g.cpu_affinity for g in facts.gpus] == ["0-31"] * 4 + ["32-63"] * 4
    assert facts.numa_nodes == [
        NumaFacts(index=0, cpus=tuple(range(0, 32)), memory_total_bytes=263604308 * 1024),
        NumaFacts(index=1, cpus=tuple(range(32, 64)), memory_total_bytes=264189324 * 1024),
    ]
    assert facts.cpu_count == 64
    assert facts.memory_total_bytes == (263604308 + 264189324) * 1024
    assert facts.gpus[4].pci_bus_id == "00000000:9A:00.0"
    assert facts.driver_version == "580.95.05"
    assert facts.cuda_version == "13.0"


def test_it_agrees_with_the_seed_json():
    facts = discover_node(
        name="seed-8gpu", sysfs_root=SEED8 / "sys", nvml=seed_nvml(), which=seed_which, hostname="seed-8gpu"
    )
    seed = seed_node_facts()

    # Fields NVML does not give must come out of the fixture tree exactly as the JSON says.
    assert facts.numa_nodes == seed.numa_nodes
    assert facts.cpu_count == seed.cpu_count
    assert facts.memory_total_bytes == seed.memory_total_bytes
    assert facts.tools == seed.tools
    assert [(g.numa_node, g.cpu_affinity) for g in facts.gpus] == [(g.numa_node, g.cpu_affinity) for g in seed.gpus]
    assert facts.to_dict() == seed.to_dict()


def test_it_takes_numa_affinity_from_topo_when_sysfs_says_minus_one(tmp_path):
    root = tmp_path / "sys"
    shutil.copytree(SEED8 / "sys", root)
    for device in (root / "bus" / "pci" / "devices").iterdir():
        (device / "numa_node").write_text("-1\n")
        (device / "local_cpulist").unlink()
    topo = (SEED8 / "nvidia-smi-topo-m.txt").read_text()

    facts = discover_node(name="seed-8gpu", sysfs_root=root, nvml=seed_nvml(), topo_text=topo, which=no_tools)

    assert [g.numa_node for g in facts.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [g.cpu_affinity for g in facts.gpus] == ["0-31"] * 4 + ["32-63"] * 4


def test_it_leaves_numa_unknown_on_two_nodes_without_any_source(tmp_path):
    root = tmp_path / "sys"
    shutil.copytree(SEED8 / "sys", root)
    for device in (root / "bus" / "pci" / "devices").iterdir():
        (device / "numa_node").write_text("-1\n")
        (device / "local_cpulist").unlink()

    facts = discover_node(name="seed-8gpu", sysfs_root=root, nvml=seed_nvml(), which=no_tools)

    assert [g.numa_node for g in facts.gpus] == [None] * 8
    assert [g.cpu_affinity for g in facts.gpus] == [""] * 8


# --- the real 2x H200 capture ---------------------------------------------------------------


def test_it_discovers_the_h200_capture_through_nvml():
    topo = (H200X2 / "topo.txt").read_text()
    facts = discover_node(name="h200x2", sysfs_root=H200X2 / "sys", nvml=h200_nvml(), topo_text=topo, which=no_tools)

    assert len(facts.gpus) == 2
    assert [g.name for g in facts.gpus] == ["NVIDIA H200", "NVIDIA H200"]
    assert [g.memory_total_bytes for g in facts.gpus] == [H200_MEMORY_BYTES, H200_MEMORY_BYTES]
    assert [g.pci_bus_id for g in facts.gpus] == ["00000000:00:06.0", "00000000:00:07.0"]
    assert [g.uuid for g in facts.gpus] == [
        "GPU-0f3cc1cf-565d-9b0a-543c-d4b754f70410",
        "GPU-8f6284fb-6446-e1dc-1efd-0d08141350d4",
    ]
    assert [g.compute_capability for g in facts.gpus] == ["9.0", "9.0"]
    # The VM's sysfs says -1 for both devices; topo -m says NUMA 0, CPUs 0-31.
    assert [g.numa_node for g in facts.gpus] == [0, 0]
    assert [g.cpu_affinity for g in facts.gpus] == ["0-31", "0-31"]
    assert facts.numa_nodes == [NumaFacts(index=0, cpus=tuple(range(32)), memory_total_bytes=4699 * 1024**2)]
    assert facts.cpu_count == 32
    assert (facts.driver_version, facts.cuda_version) == ("580.159.04", "13.0")
    assert facts.tools == {tool: None for tool in TOOLS}


def test_it_registers_the_h200_capture_from_nvidia_smi_xml_alone():
    xml = (H200X2 / "nvidia-smi-q.xml").read_text()
    topo = (H200X2 / "topo.txt").read_text()
    from_xml = discover_node(
        name="h200x2", sysfs_root=H200X2 / "sys", nvml=None, nvidia_smi_xml=xml, topo_text=topo, which=no_tools
    )
    from_nvml = discover_node(
        name="h200x2", sysfs_root=H200X2 / "sys", nvml=h200_nvml(), topo_text=topo, which=no_tools
    )

    # The XML lacks compute capability; every other field matches what NVML reports.
    assert [replace(g, compute_capability="9.0") for g in from_xml.gpus] == from_nvml.gpus
    assert (from_xml.driver_version, from_xml.cuda_version) == ("580.159.04", "13.0")


def test_it_parses_the_captured_topo_matrix():
    rows = parse_nvidia_smi_topo((H200X2 / "topo.txt").read_text())

    assert rows == {0: TopoRow(index=0, cpu_affinity="0-31", numa_node=0), 1: TopoRow(1, "0-31", 0)}


def test_it_parses_topo_with_nic_columns_and_split_affinity():
    text = (
        "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tSYS\tPIX\t0-31,64-95\t0\t\tN/A\n"
        "GPU1\tSYS\t X \tSYS\tN/A\tN/A\t\tN/A\n"
        "NIC0\tPIX\tSYS\t X \t\t\t\t\n"
        "\nLegend:\n\n  X    = Self\n"
    )

    assert parse_nvidia_smi_topo(text) == {
        0: TopoRow(index=0, cpu_affinity="0-31,64-95", numa_node=0),
        1: TopoRow(index=1, cpu_affinity="", numa_node=None),
    }


def test_it_parses_topo_padded_with_spaces():
    text = (
        "        GPU0    GPU1    CPU Affinity    NUMA Affinity\n"
        "GPU0     X      NV12    48-95,144-191   1\n"
        "GPU1    NV12     X      48-95,144-191   1\n"
    )

    rows = parse_nvidia_smi_topo(text)

    assert rows[1] == TopoRow(index=1, cpu_affinity="48-95,144-191", numa_node=1)


def test_it_rejects_a_bad_topo_affinity():
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t31-0\t0\n"

    with pytest.raises(DiscoveryError, match=r"GPU0: bad CPU Affinity '31-0'"):
        parse_nvidia_smi_topo(text)


def test_it_parses_the_nvidia_smi_xml_capture():
    xml = (H200X2 / "nvidia-smi-q.xml").read_text()

    gpus = parse_nvidia_smi_xml(xml)

    assert gpus == [
        GpuFacts(
            index=0,
            uuid="GPU-0f3cc1cf-565d-9b0a-543c-d4b754f70410",
            name="NVIDIA H200",
            memory_total_bytes=H200_MEMORY_BYTES,
            pci_bus_id="00000000:00:06.0",
        ),
        GpuFacts(
            index=1,
            uuid="GPU-8f6284fb-6446-e1dc-1efd-0d08141350d4",
            name="NVIDIA H200",
            memory_total_bytes=H200_MEMORY_BYTES,
            pci_bus_id="00000000:00:07.0",
        ),
    ]
    assert parse_nvidia_smi_xml_versions(xml) == ("580.159.04", "13.0")


def test_it_rejects_text_that_is_not_nvidia_smi_xml():
    with pytest.raises(DiscoveryError, match="not XML"):
        parse_nvidia_smi_xml("GPU 00000000:00:06.0\n    Product Name : NVIDIA H200\n")
    with pytest.raises(DiscoveryError, match="nvidia_smi_log"):
        parse_nvidia_smi_xml("<gpus><gpu/></gpus>")


# --- CPU-only hosts and failures ------------------------------------------------------------


def test_it_discovers_a_cpu_only_tree():
    facts = discover_node(name="laptop", sysfs_root=CPUONLY / "sys", nvml=None, which=no_tools, hostname="laptop")

    assert facts.gpus == []
    assert facts.cpu_count == 8
    assert facts.numa_nodes == [NumaFacts(index=0, cpus=tuple(range(8)), memory_total_bytes=16231752 * 1024)]
    assert facts.memory_total_bytes == 16231752 * 1024
    assert (facts.driver_version, facts.cuda_version) == ("", "")
    assert facts.hostname == "laptop"


def test_it_treats_a_kernel_without_numa_as_one_node(tmp_path):
    online = tmp_path / "sys" / "devices" / "system" / "cpu" / "online"
    online.parent.mkdir(parents=True)
    online.write_text("0-3\n")

    facts = discover_node(name="tiny", sysfs_root=tmp_path / "sys", nvml=None, which=no_tools)

    assert facts.numa_nodes == [NumaFacts(index=0, cpus=(0, 1, 2, 3), memory_total_bytes=None)]
    assert facts.cpu_count == 4


def test_it_names_the_file_of_a_malformed_cpulist():
    with pytest.raises(DiscoveryError) as caught:
        discover_node(name="bad", sysfs_root=MALFORMED / "sys", nvml=None, which=no_tools)

    message = str(caught.value)
    assert "node1/cpulist" in message
    assert "'7-4'" in message
    assert "end before start" in message


def test_it_rejects_a_non_integer_pci_numa_node(tmp_path):
    root = tmp_path / "sys"
    shutil.copytree(H200X2 / "sys", root)
    (root / "bus" / "pci" / "devices" / "0000:00:06.0" / "numa_node").write_text("zero\n")

    with pytest.raises(DiscoveryError, match=r"0000:00:06.0/numa_node: expected an integer, got 'zero'"):
        discover_node(name="h200x2", sysfs_root=root, nvml=h200_nvml(), which=no_tools)


def test_it_finds_no_gpus_when_the_nvml_library_is_missing():
    # pynvml is installed here but libnvidia-ml.so is not: the real NVMLError_LibraryNotFound path.
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this host has the NVML library")

    assert read_nvml_gpus(nvml=pynvml) == ([], "", "")
    assert read_nvml_gpus(nvml=None) == ([], "", "")
    assert discover_node(name="x", sysfs_root=CPUONLY / "sys", nvml=pynvml, which=no_tools).gpus == []


def test_it_finds_no_gpus_when_the_driver_is_not_loaded():
    nvml = CapturedNvml(h200_nvml().gpus, init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    facts = discover_node(name="h200x2", sysfs_root=H200X2 / "sys", nvml=nvml, which=no_tools)

    assert facts.gpus == []
    assert facts.cpu_count == 32


def test_it_keeps_index_order_when_a_gpu_query_fails():
    gpus = h200_nvml().gpus
    nvml = CapturedNvml([replace(gpus[0], compute_capability=""), gpus[1]], driver="580.159.04", cuda=13000)

    found, driver, cuda = read_nvml_gpus(nvml=nvml)

    assert [(g.index, g.compute_capability) for g in found] == [(0, ""), (1, "9.0")]
    assert (driver, cuda) == ("580.159.04", "13.0")
    assert nvml.initialised is False  # nvmlShutdown ran


def test_it_converts_nvml_bus_ids_to_sysfs_names():
    assert sysfs_pci_address("00000000:2A:00.0") == "0000:2a:00.0"
    assert sysfs_pci_address("00000001:C1:1F.7") == "0001:c1:1f.7"
    assert sysfs_pci_address("0000:db:00.0") == "0000:db:00.0"
    with pytest.raises(ValueError):
        sysfs_pci_address("GPU-0f3cc1cf")


# --- this host ------------------------------------------------------------------------------


def _nvml_gpu_count() -> int:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return 0
    try:
        return pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()


def test_it_discovers_this_host():
    facts = discover_node(name="local")

    assert len(facts.numa_nodes) >= 1
    assert facts.cpu_count == os.cpu_count()
    assert facts.all_cpus() >= set(os.sched_getaffinity(0))
    assert facts.memory_total_bytes > 0
    assert len(facts.gpus) == _nvml_gpu_count()
    assert facts.tools == {"numactl": shutil.which("numactl"), "nvcc": shutil.which("nvcc"),
                           "nvidia-smi": shutil.which("nvidia-smi")}


@pytest.mark.gpu
def test_it_discovers_real_gpus_through_nvml():
    count = _nvml_gpu_count()
    if not count:
        pytest.skip("no NVIDIA GPU with NVML here")

    facts = discover_node(name="local")

    assert len(facts.gpus) == count
    for gpu in facts.gpus:
        assert gpu.uuid.startswith("GPU-")
        assert gpu.memory_total_bytes and gpu.memory_total_bytes > 1024**3
        assert gpu.compute_capability.count(".") == 1
        assert Path("/sys/bus/pci/devices", sysfs_pci_address(gpu.pci_bus_id)).is_dir()
        if gpu.numa_node is not None:
            assert gpu.numa_node in facts.numa_indices()
    assert facts.driver_version
    assert facts.cuda_version
