"""Node topology discovery: sysfs, NVML and ``nvidia-smi topo -m`` → :class:`NodeFacts`.

Sources, in the order they are trusted:

* **sysfs** (Linux ABI, ``Documentation/ABI/stable/sysfs-devices-node`` and
  ``Documentation/ABI/testing/sysfs-bus-pci``): NUMA nodes and their CPU lists
  (``devices/system/node/node<N>/cpulist``), their memory (``node<N>/meminfo``, ``MemTotal`` in
  kB, which the kernel means as KiB), online CPUs (``devices/system/cpu/online``) and each PCI
  device's NUMA affinity (``bus/pci/devices/<bus id>/numa_node``, ``-1`` = unknown) and local
  CPUs (``local_cpulist``).
* **procfs** ``meminfo`` (``proc(5)``): ``MemTotal`` (kB, i.e. KiB) is the memory of the one
  NUMA node of a kernel without NUMA support, which has no ``devices/system/node`` in sysfs.
* **NVML** through ``pynvml`` (PyPI package ``nvidia-ml-py``): GPU count, name, UUID, memory,
  PCI bus id, compute capability, driver and CUDA versions. A host without the library or the
  driver is a CPU-only node, not an error.
* **sysfs PCI bus** (``bus/pci/devices/<bus id>/vendor`` and ``class``): when NVML gives no
  count (no library, no driver, ``nvmlDeviceGetCount`` failed), the NVIDIA display and 3D
  controllers on the bus are counted instead. That needs no driver, so a GPU host whose driver
  is broken still says how many GPUs it has, and a host without any says 0 truthfully.
* **``nvidia-smi topo -m``**: each GPU row's "CPU Affinity" and "NUMA Affinity" columns. They
  fill in what sysfs leaves unknown, which happens in VMs whose firmware gives no PCI
  proximity information (the captured 2x H200 VM reports ``-1``).

* **procfs** ``sys/net/ipv4/ip_local_port_range`` and ``ip_local_reserved_ports``
  (``Documentation/networking/ip-sysctl.rst``): the ports the kernel hands to outgoing
  connections, and those it keeps out of that use.

``nvidia-smi -q -x`` output can stand in for NVML (:func:`parse_nvidia_smi_xml`), so a node can
be registered from captured files on a machine without its GPUs.

Everything here is plain Python (no Django), so it can run on a bare host.
"""
from __future__ import annotations

import logging
import re
import shutil
import socket
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from deployments.topology import GpuFacts, NodeFacts, NumaFacts, format_cpulist, parse_cpulist

logger = logging.getLogger(__name__)

#: Tools whose absolute path discovery records in ``NodeFacts.tools`` (None when absent).
TOOLS: tuple[str, ...] = ("numactl", "nvcc", "nvidia-smi")

#: Wall-clock limit for ``nvidia-smi topo -m``; it answers in well under a second on a healthy
#: host, and a wedged driver must not hang node registration.
NVIDIA_SMI_TIMEOUT_S = 20.0

_NODE_DIR = re.compile(r"^node(\d+)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_MEM_UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


class DiscoveryError(RuntimeError):
    """A discovery source exists but cannot be read as documented (e.g. a malformed cpulist).

    The message names the file and the offending text, so an operator can look at the host.
    """


@dataclass(frozen=True)
class TopoRow:
    """One GPU row of ``nvidia-smi topo -m``: ``cpu_affinity`` as cpulist text ("" when
    ``N/A``), ``numa_node`` None when ``N/A``."""

    index: int
    cpu_affinity: str
    numa_node: int | None


class _UseRealNvml:
    """Marker default for ``discover_node(nvml=...)``: import ``pynvml`` if it is installed."""


_REAL_NVML: Any = _UseRealNvml()


# --------------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------------


def discover_node(
    *,
    name: str,
    sysfs_root: Path = Path("/sys"),
    nvml: Any = _REAL_NVML,
    topo_text: str | None = None,
    which: Callable[[str], str | None] = shutil.which,
    nvidia_smi_xml: str | None = None,
    hostname: str | None = None,
    procfs_root: Path | None = None,
) -> NodeFacts:
    """Discover this host's (or a captured host's) topology.

    Args:
        name: the node's name in Ceiling (its agent consumes queue ``node.<name>``).
        sysfs_root: root of a sysfs tree; ``/sys`` on a live host, a fixture directory in tests.
        nvml: an object exposing the ``pynvml`` functions used here (the ``pynvml`` module by
            default; None = no NVML, i.e. no GPUs from NVML).
        topo_text: ``nvidia-smi topo -m`` output. When None and some GPU's NUMA node is unknown
            from sysfs, ``nvidia-smi topo -m`` is run if ``which`` finds it.
        which: tool lookup (``shutil.which`` signature), injectable for fixture hosts.
        nvidia_smi_xml: ``nvidia-smi -q -x`` output; when given, GPUs and driver/CUDA versions
            come from it and NVML is not used.
        hostname: recorded host name; default ``socket.gethostname()``.
        procfs_root: root of a procfs tree for the port settings and, on a kernel without NUMA,
            ``meminfo``; default ``/proc`` when ``sysfs_root`` is the live ``/sys``, otherwise
            (a captured host) not read, so a fixture tree never picks up this machine's settings.

    Returns:
        :class:`NodeFacts` with CPU count (online CPUs), memory in bytes (sum of NUMA nodes),
        NUMA nodes sorted by index (without NUMA in sysfs: one node 0 with every online CPU and
        ``/proc/meminfo``'s ``MemTotal``), ``memory_source`` (:data:`MEMORY_FROM_NUMA_MEMINFO`,
        :data:`MEMORY_FROM_PROC_MEMINFO`, or None when no source gave a figure), GPUs sorted by NVML index with their NUMA node and CPU
        affinity resolved (sysfs, then ``topo -m``, then the only NUMA node if there is one),
        ``tools`` for :data:`TOOLS`, ``nvml_status`` (``"ok"``, NVML's reason for not
        answering, the NVML calls that failed after it initialised (see :func:`read_nvml`:
        the GPUs read are kept, this never raises), or None when the GPUs came from
        ``nvidia_smi_xml``), ``gpu_count_source`` (:data:`GPU_COUNT_FROM_NVML`,
        :data:`GPU_COUNT_FROM_NVIDIA_SMI_XML`, :data:`GPU_COUNT_FROM_SYSFS_PCI`, or None when
        NVML gave no count and the PCI bus could not be read either) and ``pci_gpu_count``
        (NVIDIA GPUs on the PCI bus, see :func:`count_pci_nvidia_gpus`; counted only when NVML
        gave no GPU and did not answer cleanly, otherwise None).

    Raises:
        DiscoveryError: a sysfs or procfs file, or the ``topo -m`` text, is present but malformed.
    """
    sysfs_root = Path(sysfs_root)
    procfs_root = _procfs_root(sysfs_root=sysfs_root, procfs_root=procfs_root)
    numa_nodes = read_numa_nodes(sysfs_root=sysfs_root)
    online = read_online_cpus(sysfs_root=sysfs_root)
    memory_source: str | None = None
    if numa_nodes:
        if any(n.memory_total_bytes is not None for n in numa_nodes):
            memory_source = MEMORY_FROM_NUMA_MEMINFO
    else:
        # Kernels built without CONFIG_NUMA have no node directory: the whole machine is one node,
        # and /proc/meminfo's MemTotal is its memory.
        memory = read_proc_memtotal(procfs_root=procfs_root) if procfs_root is not None else None
        numa_nodes = [NumaFacts(index=0, cpus=tuple(online), memory_total_bytes=memory)]
        memory_source = MEMORY_FROM_PROC_MEMINFO if memory is not None else None
    if not online:
        online = sorted({c for n in numa_nodes for c in n.cpus})

    tools = {tool: which(tool) for tool in TOOLS}
    nvml_status: str | None = None
    pci_gpu_count: int | None = None
    if nvidia_smi_xml is not None:
        gpus = parse_nvidia_smi_xml(nvidia_smi_xml)
        driver_version, cuda_version = parse_nvidia_smi_xml_versions(nvidia_smi_xml)
        gpu_count_source: str | None = GPU_COUNT_FROM_NVIDIA_SMI_XML
    else:
        gpus, driver_version, cuda_version, nvml_status = read_nvml(nvml=nvml)
        gpu_count_source = GPU_COUNT_FROM_NVML
        if not gpus and nvml_status != NVML_OK:
            # NVML gave no count: the PCI bus says how many NVIDIA GPUs the host has, driver or not.
            try:
                pci_gpu_count = count_pci_nvidia_gpus(sysfs_root=sysfs_root)
            except DiscoveryError as exc:
                logger.warning("GPU count unknown: NVML not available (%s) and %s", nvml_status, exc)
            gpu_count_source = GPU_COUNT_FROM_SYSFS_PCI if pci_gpu_count is not None else None

    gpus = [_with_sysfs_locality(gpu, sysfs_root=sysfs_root) for gpu in gpus]
    if any(g.numa_node is None for g in gpus):
        if topo_text is None and tools.get("nvidia-smi"):
            topo_text = run_nvidia_smi_topo(executable=str(tools["nvidia-smi"]))
        if topo_text:
            rows = parse_nvidia_smi_topo(topo_text)
            gpus = [_with_topo_locality(g, rows.get(g.index)) for g in gpus]
    gpus = [_with_fallback_locality(g, numa_nodes=numa_nodes) for g in gpus]

    memory = sum(n.memory_total_bytes or 0 for n in numa_nodes)
    return NodeFacts(
        name=name,
        hostname=hostname if hostname is not None else socket.gethostname(),
        cpu_count=len(online),
        memory_total_bytes=memory,
        gpus=sorted(gpus, key=lambda g: g.index),
        numa_nodes=numa_nodes,
        tools=tools,
        driver_version=driver_version,
        cuda_version=cuda_version,
        nvml_status=nvml_status,
        gpu_count_source=gpu_count_source,
        pci_gpu_count=pci_gpu_count,
        memory_source=memory_source,
        **(read_port_settings(procfs_root=procfs_root) if procfs_root is not None else {}),
    )


def _procfs_root(*, sysfs_root: Path, procfs_root: Path | None) -> Path | None:
    # A fixture sysfs tree never reads this machine's /proc unless told to.
    if procfs_root is not None:
        return Path(procfs_root)
    return Path("/proc") if Path(sysfs_root) == Path("/sys") else None


def read_port_settings(*, procfs_root: Path) -> dict:
    """``local_port_range`` and ``reserved_ports`` for :class:`NodeFacts` from
    ``<procfs_root>/sys/net/ipv4/``; a file that is missing or malformed is left out (not
    reported), never an error: these feed warnings only.

    ``ip_local_port_range`` is two integers (``32768\t60999`` by default);
    ``ip_local_reserved_ports`` is a comma-separated list of ports and inclusive ranges
    (``8000-8010,9000``), empty by default.
    """
    base = Path(procfs_root) / "sys" / "net" / "ipv4"
    out: dict = {}
    try:
        low, high = (int(v) for v in (base / "ip_local_port_range").read_text(encoding="ascii").split())
        if 0 < low <= high <= 65535:
            out["local_port_range"] = (low, high)
    except (OSError, ValueError):
        pass
    try:
        text = (base / "ip_local_reserved_ports").read_text(encoding="ascii").strip()
        ranges = []
        for item in filter(None, (part.strip() for part in text.split(","))):
            a, _, b = item.partition("-")
            low, high = int(a), int(b or a)
            if not 0 < low <= high <= 65535:
                raise ValueError(item)
            ranges.append((low, high))
        out["reserved_ports"] = tuple(sorted(ranges))
    except (OSError, ValueError):
        pass
    return out


# --------------------------------------------------------------------------------------------
# sysfs
# --------------------------------------------------------------------------------------------


def read_cpulist_file(path: Path) -> list[int]:
    """Read a kernel cpulist file (``0-31,64-95``) into sorted CPU ids.

    Raises:
        DiscoveryError: the file holds something that is not cpulist syntax; the message
            gives the path and the text.
    """
    text = path.read_text().strip()
    try:
        return parse_cpulist(text)
    except ValueError as exc:
        raise DiscoveryError(f"{path}: malformed CPU list {text!r}: {exc}") from exc


def read_online_cpus(*, sysfs_root: Path) -> list[int]:
    """Online CPU ids from ``<sysfs_root>/devices/system/cpu/online``; [] when the file is absent."""
    path = sysfs_root / "devices" / "system" / "cpu" / "online"
    if not path.is_file():
        return []
    return read_cpulist_file(path)


def read_numa_nodes(*, sysfs_root: Path) -> list[NumaFacts]:
    """NUMA nodes from ``<sysfs_root>/devices/system/node/node<N>/``, sorted by index.

    CPUs come from ``cpulist`` and memory (bytes) from the ``MemTotal`` line of ``meminfo``
    (kB there means KiB, see ``drivers/base/node.c``). A node without CPUs (memory-only, e.g.
    CXL or HBM exposed as NUMA memory) is kept with an empty CPU tuple. Returns [] when the
    directory does not exist (kernel without NUMA support).

    Raises:
        DiscoveryError: a malformed ``cpulist`` or ``meminfo``.
    """
    base = sysfs_root / "devices" / "system" / "node"
    if not base.is_dir():
        return []
    nodes: list[NumaFacts] = []
    for entry in base.iterdir():
        match = _NODE_DIR.match(entry.name)
        if not match or not entry.is_dir():
            continue
        cpulist = entry / "cpulist"
        cpus = read_cpulist_file(cpulist) if cpulist.is_file() else []
        nodes.append(
            NumaFacts(index=int(match.group(1)), cpus=tuple(cpus), memory_total_bytes=_read_node_memtotal(entry))
        )
    return sorted(nodes, key=lambda n: n.index)


#: ``NodeFacts.memory_source`` when each NUMA node's memory came from sysfs.
MEMORY_FROM_NUMA_MEMINFO = "sysfs devices/system/node/node<N>/meminfo MemTotal"
#: ``NodeFacts.memory_source`` on a kernel without NUMA: the one node's memory is the host's.
MEMORY_FROM_PROC_MEMINFO = "/proc/meminfo MemTotal (kernel without NUMA nodes in sysfs)"


def read_proc_memtotal(*, procfs_root: Path) -> int | None:
    """The host's memory in bytes from ``<procfs_root>/meminfo``'s ``MemTotal`` line
    (``MemTotal:       16231752 kB``; kB there means KiB, see ``proc(5)``); None when the file
    or the line is absent. ``MemFree`` and ``MemAvailable`` are not read: facts hold capacity.

    Raises:
        DiscoveryError: a ``MemTotal`` line that is not ``<digits> kB``.
    """
    path = Path(procfs_root) / "meminfo"
    if not path.is_file():
        return None
    for line in path.read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == "MemTotal:":
            if len(fields) != 3 or not fields[1].isdigit() or fields[2] != "kB":
                raise DiscoveryError(f"{path}: malformed MemTotal line {line.strip()!r}")
            return int(fields[1]) * 1024
    return None


def _read_node_memtotal(node_dir: Path) -> int | None:
    path = node_dir / "meminfo"
    if not path.is_file():
        return None
    for line in path.read_text().splitlines():
        # "Node 0 MemTotal:       263604308 kB"
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "MemTotal:":
            if not fields[3].isdigit() or (len(fields) > 4 and fields[4] != "kB"):
                raise DiscoveryError(f"{path}: malformed MemTotal line {line.strip()!r}")
            return int(fields[3]) * 1024
    return None


#: PCI vendor id of NVIDIA (``PCI_VENDOR_ID_NVIDIA`` in ``include/linux/pci_ids.h``).
PCI_VENDOR_NVIDIA = 0x10DE
#: PCI base class and subclass (the class code's upper 16 bits) counted as GPUs: VGA-compatible
#: display controller (``PCI_CLASS_DISPLAY_VGA``, 0x0300) and 3D controller
#: (``PCI_CLASS_DISPLAY_3D``, 0x0302, data-center GPUs without a display output).
PCI_GPU_CLASSES = (0x0300, 0x0302)

#: ``NodeFacts.gpu_count_source`` values: NVML counted the GPUs (``gpus`` is its list) ...
GPU_COUNT_FROM_NVML = "nvml"
#: ... ``nvidia-smi -q -x`` output listed them ...
GPU_COUNT_FROM_NVIDIA_SMI_XML = "nvidia-smi -q -x"
#: ... or NVML gave no count and the PCI bus in sysfs did (``pci_gpu_count``).
GPU_COUNT_FROM_SYSFS_PCI = "sysfs bus/pci/devices (vendor 0x10de, class 0x0300xx/0x0302xx)"


def count_pci_nvidia_gpus(*, sysfs_root: Path) -> int:
    """NVIDIA GPUs on the PCI bus: devices under ``<sysfs_root>/bus/pci/devices/`` whose
    ``vendor`` is :data:`PCI_VENDOR_NVIDIA` (``0x10de``) and whose ``class`` (``0x030200``: base
    class, subclass, programming interface) is one of :data:`PCI_GPU_CLASSES`. The kernel
    writes these files for every device whether or not a driver is bound, so this counts GPUs
    NVML cannot see (no library, driver not loaded). NVIDIA's audio functions (class 0x0403)
    and bridges are not GPUs and are not counted.

    Raises:
        DiscoveryError: the directory cannot be listed, or a device's ``vendor`` or ``class``
            cannot be read or is not hexadecimal; the count would then be a guess.
    """
    base = Path(sysfs_root) / "bus" / "pci" / "devices"
    try:
        devices = sorted(base.iterdir())
    except OSError as exc:
        raise DiscoveryError(f"cannot list {base}: {exc.strerror or exc}") from exc
    count = 0
    for device in devices:
        vendor = _read_pci_hex(device / "vendor")
        if vendor != PCI_VENDOR_NVIDIA:
            continue
        if _read_pci_hex(device / "class") >> 8 in PCI_GPU_CLASSES:
            count += 1
    return count


def _read_pci_hex(path: Path) -> int:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise DiscoveryError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    try:
        return int(text, 16)
    except ValueError as exc:
        raise DiscoveryError(f"{path}: expected a hexadecimal number, got {text!r}") from exc


def sysfs_pci_address(bus_id: str) -> str:
    """Turn an NVML / nvidia-smi PCI bus id (``00000000:2A:00.0``, 32-bit domain, upper case)
    into the sysfs device directory name (``0000:2a:00.0``: the kernel prints the domain with
    ``%04x``, see ``drivers/pci/probe.c``).

    Raises:
        ValueError: not ``domain:bus:device.function``.
    """
    parts = bus_id.strip().split(":")
    if len(parts) != 3 or "." not in parts[2]:
        raise ValueError(f"not a PCI bus id: {bus_id!r}")
    domain, bus, devfn = parts
    dev, _, fn = devfn.partition(".")
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{int(fn, 16):x}"


def read_pci_locality(*, sysfs_root: Path, bus_id: str) -> tuple[int | None, str]:
    """NUMA node and local CPU list of a PCI device from sysfs.

    Returns ``(numa_node, local_cpulist)``: numa_node None when the device is absent or the
    kernel reports ``-1`` (no proximity information); local_cpulist "" when absent.

    Raises:
        DiscoveryError: ``numa_node`` or ``local_cpulist`` present but malformed.
    """
    try:
        device = sysfs_root / "bus" / "pci" / "devices" / sysfs_pci_address(bus_id)
    except ValueError:
        return None, ""
    numa: int | None = None
    numa_path = device / "numa_node"
    if numa_path.is_file():
        text = numa_path.read_text().strip()
        try:
            value = int(text)
        except ValueError as exc:
            raise DiscoveryError(f"{numa_path}: expected an integer, got {text!r}") from exc
        numa = value if value >= 0 else None
    local = ""
    local_path = device / "local_cpulist"
    if local_path.is_file():
        local = format_cpulist(read_cpulist_file(local_path))
    return numa, local


def _with_sysfs_locality(gpu: GpuFacts, *, sysfs_root: Path) -> GpuFacts:
    if not gpu.pci_bus_id:
        return gpu
    numa, local = read_pci_locality(sysfs_root=sysfs_root, bus_id=gpu.pci_bus_id)
    return replace(
        gpu,
        numa_node=gpu.numa_node if numa is None else numa,
        cpu_affinity=gpu.cpu_affinity or local,
    )


def _with_topo_locality(gpu: GpuFacts, row: TopoRow | None) -> GpuFacts:
    if row is None:
        return gpu
    # When sysfs knew the node, the topo row only adds a missing CPU affinity.
    if gpu.numa_node is not None:
        return replace(gpu, cpu_affinity=gpu.cpu_affinity or row.cpu_affinity)
    return replace(gpu, numa_node=row.numa_node, cpu_affinity=row.cpu_affinity or gpu.cpu_affinity)


def _with_fallback_locality(gpu: GpuFacts, *, numa_nodes: list[NumaFacts]) -> GpuFacts:
    numa = gpu.numa_node
    if numa is None and len(numa_nodes) == 1:
        # With one NUMA node every device is local to it; no source is needed to say so.
        numa = numa_nodes[0].index
    affinity = gpu.cpu_affinity
    if not affinity and numa is not None:
        node = next((n for n in numa_nodes if n.index == numa), None)
        affinity = format_cpulist(node.cpus) if node else ""
    return replace(gpu, numa_node=numa, cpu_affinity=affinity)


# --------------------------------------------------------------------------------------------
# NVML
# --------------------------------------------------------------------------------------------


def _text(value: Any) -> str:
    # nvidia-ml-py before 11.5 returned bytes for strings; current releases return str.
    return value.decode() if isinstance(value, bytes) else str(value)


NVML_OK = "ok"
#: ``nvml_status`` when the ``pynvml`` module is not installed.
NVML_NOT_INSTALLED = "pynvml is not installed (PyPI nvidia-ml-py)"
#: ``nvml_status`` when the caller passed ``nvml=None``.
NVML_NONE_GIVEN = "no NVML library given"


def read_nvml_gpus(*, nvml: Any = _REAL_NVML) -> tuple[list[GpuFacts], str, str]:
    """``(gpus, driver_version, cuda_version)`` of :func:`read_nvml`, without its status."""
    gpus, driver, cuda, _status = read_nvml(nvml=nvml)
    return gpus, driver, cuda


def read_nvml(*, nvml: Any = _REAL_NVML) -> tuple[list[GpuFacts], str, str, str]:
    """GPUs, driver/CUDA versions and NVML's status.

    ``nvml`` is the ``pynvml`` module (default; None when it is not installed) or an object
    with the same functions: ``nvmlInit``, ``nvmlShutdown``, ``nvmlDeviceGetCount``,
    ``nvmlDeviceGetHandleByIndex``, ``nvmlDeviceGetName``, ``nvmlDeviceGetUUID``,
    ``nvmlDeviceGetMemoryInfo`` (``.total`` in bytes), ``nvmlDeviceGetPciInfo`` (``.busId``),
    ``nvmlDeviceGetCudaComputeCapability`` (``(major, minor)``), ``nvmlSystemGetDriverVersion``,
    ``nvmlSystemGetCudaDriverVersion`` (``major*1000 + minor*10``, NVML's encoding) and the
    ``NVMLError`` exception class. Passing such an object is how tests play a host's NVML.

    Returns ``(gpus, driver_version, cuda_version, status)``. ``status`` is :data:`NVML_OK`
    when NVML initialised and answered every call (also when it counted no GPU). When
    ``nvmlInit`` fails it is the reason (:data:`NVML_NOT_INSTALLED`, or NVML's own text such as
    ``"NVML Shared Library Not Found"`` or ``"Driver Not Loaded"``) with ``([], "", "")``: a
    CPU-only node, not an error.

    When NVML initialised but a later call raised ``NVMLError``, nothing is raised: ``status``
    names each failed call and NVML's text, ``"; "``-separated (see :func:`nvml_failure`), e.g.
    ``"nvmlDeviceGetCount failed: GPU is lost"`` (then ``gpus`` is [] since NVML gave no
    count) or ``"GPU 1: nvmlDeviceGetName failed: Unknown Error"``. What could be read is
    kept: a GPU whose queries fail stays in the list with the fields that were read (all but
    ``index`` empty when even its handle could not be had), so indices stay aligned with
    ``nvidia-smi`` and ``CUDA_VISIBLE_DEVICES``. ``nvmlShutdown`` runs after every successful
    ``nvmlInit``; its own failure is only logged.
    """
    if isinstance(nvml, _UseRealNvml):
        try:
            import pynvml as nvml  # noqa: PLC0415 - optional on CPU-only hosts
        except ImportError:
            return [], "", "", NVML_NOT_INSTALLED
    if nvml is None:
        return [], "", "", NVML_NONE_GIVEN
    nvml_error: type[BaseException] = getattr(nvml, "NVMLError", Exception)
    try:
        nvml.nvmlInit()
    except nvml_error as exc:
        logger.info("NVML unavailable (%s): treating this host as CPU-only", exc)
        return [], "", "", _nvml_text(exc)
    failures: list[str] = []
    query = _NvmlQuery(nvml_error, failures)
    try:
        driver = query("nvmlSystemGetDriverVersion", lambda: _text(nvml.nvmlSystemGetDriverVersion()), "")
        cuda = query("nvmlSystemGetCudaDriverVersion",
                     lambda: _cuda_version(int(nvml.nvmlSystemGetCudaDriverVersion())), "")
        count = query("nvmlDeviceGetCount", lambda: int(nvml.nvmlDeviceGetCount()), 0)
        gpus = [_nvml_gpu(nvml, query, index) for index in range(count)]
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml_error as exc:
            logger.warning("NVML: nvmlShutdown failed: %s", _nvml_text(exc))
    return gpus, driver, cuda, "; ".join(failures) or NVML_OK


def nvml_failure(call: str, exc: BaseException, *, gpu: int | None = None) -> str:
    """How ``nvml_status`` names one failed NVML call: ``"<call> failed: <NVML's text>"``,
    prefixed ``"GPU <index>: "`` for a per-device query."""
    text = f"{call} failed: {_nvml_text(exc)}"
    return f"GPU {gpu}: {text}" if gpu is not None else text


def _nvml_text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class _NvmlQuery:
    """Runs one NVML call; on ``NVMLError`` logs it, appends :func:`nvml_failure` to
    ``failures`` and returns the default."""

    def __init__(self, error: type[BaseException], failures: list[str]):
        self.error = error
        self.failures = failures

    def __call__(self, call: str, fn: Callable[[], Any], default: Any, *, gpu: int | None = None) -> Any:
        try:
            return fn()
        except self.error as exc:
            failure = nvml_failure(call, exc, gpu=gpu)
            logger.warning("NVML query failed: %s", failure)
            self.failures.append(failure)
            return default


def _cuda_version(encoded: int) -> str:
    # NVML_CUDA_DRIVER_VERSION_MAJOR/MINOR in nvml.h: 13000 → "13.0", 12040 → "12.4".
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


_NO_HANDLE = object()


def _nvml_gpu(nvml: Any, query: _NvmlQuery, index: int) -> GpuFacts:
    handle = query("nvmlDeviceGetHandleByIndex", lambda: nvml.nvmlDeviceGetHandleByIndex(index), _NO_HANDLE, gpu=index)
    if handle is _NO_HANDLE:
        return GpuFacts(index=index)
    cc = query("nvmlDeviceGetCudaComputeCapability", lambda: nvml.nvmlDeviceGetCudaComputeCapability(handle), None,
               gpu=index)
    return GpuFacts(
        index=index,
        uuid=query("nvmlDeviceGetUUID", lambda: _text(nvml.nvmlDeviceGetUUID(handle)), "", gpu=index),
        name=query("nvmlDeviceGetName", lambda: _text(nvml.nvmlDeviceGetName(handle)), "", gpu=index),
        memory_total_bytes=query("nvmlDeviceGetMemoryInfo", lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                                 None, gpu=index),
        pci_bus_id=query("nvmlDeviceGetPciInfo", lambda: _text(nvml.nvmlDeviceGetPciInfo(handle).busId), "",
                         gpu=index),
        compute_capability=f"{cc[0]}.{cc[1]}" if cc else "",
    )


# --------------------------------------------------------------------------------------------
# nvidia-smi
# --------------------------------------------------------------------------------------------


def run_nvidia_smi_topo(*, executable: str) -> str | None:
    """Run ``<executable> topo -m`` (argv list, no shell) and return its stdout.

    Returns None (and logs why) when it fails or exceeds :data:`NVIDIA_SMI_TIMEOUT_S`: this
    source only refines NUMA affinity, so its absence must not stop discovery.
    """
    try:
        done = subprocess.run(
            [executable, "topo", "-m"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        logger.warning("nvidia-smi topo -m failed: %s", exc)
        return None
    if done.returncode != 0:
        logger.warning("nvidia-smi topo -m exited %d: %s", done.returncode, done.stderr.strip()[:500])
        return None
    return done.stdout


def _split_topo_line(line: str) -> list[str]:
    # Cells are tab-separated; some driver releases pad with spaces instead.
    cells = line.split("\t") if "\t" in line else re.split(r"\s{2,}", line)
    return [c.strip() for c in cells]


def parse_nvidia_smi_topo(text: str) -> dict[int, TopoRow]:
    """Parse the GPU rows of ``nvidia-smi topo -m`` into ``{gpu index: TopoRow}``.

    The header names the device columns (``GPU0``, ``NIC0``, ``mlx5_0`` …) and then
    ``CPU Affinity`` and ``NUMA Affinity`` (newer drivers add ``GPU NUMA ID``). Rows are aligned
    by counting device columns, then taking the next non-empty cells, because drivers emit an
    extra empty cell before ``GPU NUMA ID``. Terminal escape codes (the header is underlined)
    are ignored; ``N/A`` means unknown. Text after the matrix (legend, other commands' output)
    is ignored.

    Raises:
        DiscoveryError: a GPU row's CPU Affinity or NUMA Affinity is neither ``N/A`` nor valid
            (cpulist / integer).
    """
    rows: dict[int, TopoRow] = {}
    n_devices: int | None = None
    for raw in _ANSI.sub("", text).splitlines():
        cells = _split_topo_line(raw)
        named = [c for c in cells if c]
        if n_devices is None:
            if "CPU Affinity" in named:
                n_devices = named.index("CPU Affinity")
            continue
        match = re.fullmatch(r"GPU(\d+)", cells[0]) if cells else None
        if not match:
            if raw.strip().startswith("Legend"):
                break
            continue
        tail = [c for c in cells[1 + n_devices :] if c]
        cpu_text = tail[0] if tail else "N/A"
        numa_text = tail[1] if len(tail) > 1 else "N/A"
        index = int(match.group(1))
        cpu_affinity = ""
        if cpu_text != "N/A":
            try:
                cpu_affinity = format_cpulist(parse_cpulist(cpu_text))
            except ValueError as exc:
                raise DiscoveryError(f"nvidia-smi topo -m, GPU{index}: bad CPU Affinity {cpu_text!r}: {exc}") from exc
        numa: int | None = None
        if numa_text != "N/A":
            if not numa_text.isdigit():
                raise DiscoveryError(f"nvidia-smi topo -m, GPU{index}: bad NUMA Affinity {numa_text!r}")
            numa = int(numa_text)
        rows[index] = TopoRow(index=index, cpu_affinity=cpu_affinity, numa_node=numa)
    return rows


def _memory_bytes(text: str) -> int | None:
    # nvidia-smi writes "143771 MiB"; units are binary (MiB = 2**20 bytes).
    fields = text.split()
    if len(fields) != 2 or not fields[0].isdigit() or fields[1] not in _MEM_UNITS:
        return None
    return int(fields[0]) * _MEM_UNITS[fields[1]]


def _xml_root(text: str) -> ET.Element:
    try:
        return ET.fromstring(text)
    except ET.ParseError as exc:
        raise DiscoveryError(f"nvidia-smi -q -x output is not XML: {exc}") from exc


def parse_nvidia_smi_xml(text: str) -> list[GpuFacts]:
    """GPUs from ``nvidia-smi -q -x`` output, in document order (= nvidia-smi index order).

    Fields: ``product_name`` → name, ``uuid``, ``fb_memory_usage/total`` ("143771 MiB") → bytes,
    ``pci/pci_bus_id``. The document carries neither NUMA affinity nor compute capability, so
    those stay unknown here (discovery fills NUMA from sysfs or ``topo -m``). The external DTD
    named in the DOCTYPE is never fetched.

    Raises:
        DiscoveryError: the text is not XML or not an ``nvidia_smi_log`` document.
    """
    root = _xml_root(text)
    if root.tag != "nvidia_smi_log":
        raise DiscoveryError(f"expected an <nvidia_smi_log> document, got <{root.tag}>")
    gpus = []
    for index, gpu in enumerate(root.findall("gpu")):
        gpus.append(
            GpuFacts(
                index=index,
                uuid=(gpu.findtext("uuid") or "").strip(),
                name=(gpu.findtext("product_name") or "").strip(),
                memory_total_bytes=_memory_bytes(gpu.findtext("fb_memory_usage/total") or ""),
                pci_bus_id=(gpu.findtext("pci/pci_bus_id") or gpu.get("id") or "").strip(),
            )
        )
    return gpus


def parse_nvidia_smi_xml_versions(text: str) -> tuple[str, str]:
    """``(driver_version, cuda_version)`` from ``nvidia-smi -q -x`` output ("" when absent).

    Raises:
        DiscoveryError: the text is not XML.
    """
    root = _xml_root(text)
    return (root.findtext("driver_version") or "").strip(), (root.findtext("cuda_version") or "").strip()
