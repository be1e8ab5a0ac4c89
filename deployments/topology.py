"""Plain facts about a node's hardware, independent of the database.

:class:`NodeFacts` is what discovery produces (from sysfs, NVML and ``nvidia-smi topo -m``),
what recipe validation and launch-plan rendering consume, and what ``node_register`` stores
as :class:`deployments.models.Node` rows. CPU lists use the Linux kernel's cpulist syntax
(``0-31,64-95``; see ``Documentation/admin-guide/cputopology.rst``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class GpuFacts:
    """One GPU. ``index`` is NVML's index (the one ``nvidia-smi`` and ``CUDA_VISIBLE_DEVICES``
    use with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``); memory in bytes; ``numa_node`` None = unknown."""

    index: int
    uuid: str = ""
    name: str = ""
    memory_total_bytes: int | None = None
    pci_bus_id: str = ""
    numa_node: int | None = None
    compute_capability: str = ""
    cpu_affinity: str = ""


@dataclass(frozen=True)
class NumaFacts:
    """One NUMA node: its index, its CPUs (sorted ids) and its memory in bytes."""

    index: int
    cpus: tuple[int, ...]
    memory_total_bytes: int | None = None


@dataclass
class NodeFacts:
    """Everything Ceiling needs to know about a host to validate and render recipes for it.

    ``tools`` maps a tool name (``numactl``, ``nvcc``, ``nvidia-smi``) to its absolute path, or
    None when absent. ``local_port_range`` and ``reserved_ports`` are the node's own
    ``net.ipv4`` port settings (``Documentation/networking/ip-sysctl.rst``), used to warn about
    recipe ports that outgoing connections may take first.
    """

    name: str
    hostname: str = ""
    cpu_count: int = 0
    memory_total_bytes: int = 0
    gpus: list[GpuFacts] = field(default_factory=list)
    numa_nodes: list[NumaFacts] = field(default_factory=list)
    tools: dict[str, str | None] = field(default_factory=dict)
    driver_version: str = ""
    cuda_version: str = ""
    #: ``net.ipv4.ip_local_port_range`` as ``(low, high)``, inclusive; None = not reported.
    local_port_range: tuple[int, int] | None = None
    #: ``net.ipv4.ip_local_reserved_ports`` as sorted inclusive ``(low, high)`` ranges.
    reserved_ports: tuple[tuple[int, int], ...] = ()
    #: NVML at discovery: ``"ok"`` (it initialised and answered every call; ``gpus`` is what it
    #: counted, maybe none), the reason it could not initialise (e.g. ``"NVML Shared Library Not
    #: Found"``), the calls that failed after it did (``"nvmlDeviceGetCount failed: GPU is lost"``,
    #: ``"GPU 1: nvmlDeviceGetName failed: Unknown Error"``; ``gpus`` holds what was read), or
    #: None when not recorded (GPUs from ``nvidia-smi -q -x``, facts written by hand, an older
    #: node agent).
    nvml_status: str | None = None
    #: Where the GPU count came from (the strings of ``deployments.discovery.GPU_COUNT_FROM_*``):
    #: NVML, ``nvidia-smi -q -x``, or the PCI bus in sysfs when NVML gave no count; None when
    #: NVML gave no count and sysfs could not be read either (the count is unknown), or when not
    #: recorded (facts written by hand, an older node agent).
    gpu_count_source: str | None = None
    #: NVIDIA GPUs (display and 3D controllers) sysfs lists on the PCI bus, counted when NVML gave
    #: no GPU and did not answer cleanly; they are not in ``gpus`` (nothing usable is known about
    #: them). None when not counted (NVML answered) or sysfs could not be read.
    pci_gpu_count: int | None = None
    #: Where ``memory_total_bytes`` and the NUMA nodes' memory (bytes) came from: each node's
    #: sysfs ``meminfo``, or ``/proc/meminfo``'s ``MemTotal`` for the one node of a kernel
    #: without NUMA (the strings of ``deployments.discovery.MEMORY_FROM_*``); None when no
    #: source gave a figure or it was not recorded (facts written by hand, an older node agent).
    memory_source: str | None = None

    def gpu_indices(self) -> set[int]:
        return {g.index for g in self.gpus}

    def numa_indices(self) -> set[int]:
        return {n.index for n in self.numa_nodes}

    def all_cpus(self) -> set[int]:
        cpus: set[int] = set()
        for n in self.numa_nodes:
            cpus.update(n.cpus)
        if not cpus and self.cpu_count:
            cpus = set(range(self.cpu_count))
        return cpus

    def numa(self, index: int) -> NumaFacts | None:
        for n in self.numa_nodes:
            if n.index == index:
                return n
        return None

    def has_tool(self, name: str) -> bool:
        return bool(self.tools.get(name))

    def to_dict(self) -> dict:
        data = asdict(self)
        for n in data["numa_nodes"]:
            n["cpus"] = format_cpulist(n["cpus"])
        # JSON's shapes, as the stored topology reads back: lists, not tuples.
        data["local_port_range"] = list(self.local_port_range) if self.local_port_range else None
        data["reserved_ports"] = [list(r) for r in self.reserved_ports]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "NodeFacts":
        """Inverse of :meth:`to_dict` (accepts cpus as a cpulist string or a list of ints)."""
        numa = []
        for n in data.get("numa_nodes", []):
            cpus = n.get("cpus", ())
            cpus = parse_cpulist(cpus) if isinstance(cpus, str) else sorted(int(c) for c in cpus)
            numa.append(NumaFacts(index=int(n["index"]), cpus=tuple(cpus), memory_total_bytes=n.get("memory_total_bytes")))
        gpus = [GpuFacts(**g) for g in data.get("gpus", [])]
        return cls(
            name=data["name"],
            hostname=data.get("hostname", ""),
            cpu_count=int(data.get("cpu_count") or 0),   # null: not reported (the API's spelling)
            memory_total_bytes=int(data.get("memory_total_bytes") or 0),
            gpus=gpus,
            numa_nodes=numa,
            tools=dict(data.get("tools", {})),
            driver_version=data.get("driver_version", ""),
            cuda_version=data.get("cuda_version", ""),
            nvml_status=nvml_status_from_dict(data),
            **gpu_count_from_dict(data),
            memory_source=memory_source_from_dict(data),
            **port_settings_from_dict(data),
        )


def nvml_status_from_dict(data: dict) -> str | None:
    """``nvml_status`` from a facts dict or a node's stored ``topology``; None when absent or not
    a non-empty string (rows stored before it was recorded)."""
    value = data.get("nvml_status")
    return value if isinstance(value, str) and value else None


def gpu_count_from_dict(data: dict) -> dict:
    """``gpu_count_source`` and ``pci_gpu_count`` keyword arguments from a facts dict or a node's
    stored ``topology``; each None when absent or malformed (rows stored before they were
    recorded)."""
    source = data.get("gpu_count_source")
    count = data.get("pci_gpu_count")
    return {
        "gpu_count_source": source if isinstance(source, str) and source else None,
        "pci_gpu_count": count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None,
    }


def memory_source_from_dict(data: dict) -> str | None:
    """``memory_source`` from a facts dict or a node's stored ``topology``; None when absent or
    not a non-empty string."""
    value = data.get("memory_source")
    return value if isinstance(value, str) and value else None


def port_settings_from_dict(data: dict) -> dict:
    """``local_port_range`` and ``reserved_ports`` keyword arguments from a facts dict (as
    :meth:`NodeFacts.to_dict` writes it, or a node's stored ``topology``); malformed or absent
    values become "not reported" rather than an error, since older rows do not carry them."""
    out: dict = {}
    try:
        low, high = (int(v) for v in data.get("local_port_range") or ())
        if 0 < low <= high <= 65535:
            out["local_port_range"] = (low, high)
    except (TypeError, ValueError):
        pass
    try:
        out["reserved_ports"] = tuple(sorted((int(a), int(b)) for a, b in data.get("reserved_ports") or ()))
    except (TypeError, ValueError):
        pass
    return out


def parse_cpulist(text: str) -> list[int]:
    """Parse kernel cpulist syntax (``"0-3,8,10-11"``) into sorted unique ints.

    Raises ``ValueError`` with the offending item on malformed input (e.g. ``"3-1"``, ``"a"``).
    An empty string is an empty list.
    """
    cpus: set[int] = set()
    text = (text or "").strip()
    if not text:
        return []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise ValueError(f"empty item in CPU list {text!r}")
        if "-" in item:
            lo_s, _, hi_s = item.partition("-")
            if not (lo_s.isdigit() and hi_s.isdigit()):
                raise ValueError(f"bad CPU range {item!r}")
            lo, hi = int(lo_s), int(hi_s)
            if hi < lo:
                raise ValueError(f"bad CPU range {item!r}: end before start")
            cpus.update(range(lo, hi + 1))
        else:
            if not item.isdigit():
                raise ValueError(f"bad CPU id {item!r}")
            cpus.add(int(item))
    return sorted(cpus)


def same_cpulist(a: str, b: str) -> bool:
    """Whether two cpulists (``"0-3"``, ``"0,1,2,3"``) name the same CPUs (or memory nodes);
    text that is not cpulist syntax is compared as written, stripped."""
    try:
        return set(parse_cpulist(a)) == set(parse_cpulist(b))
    except ValueError:
        return a.strip() == b.strip()


def format_cpulist(cpus) -> str:
    """Format CPU ids as compact kernel cpulist syntax (``[0,1,2,3,8]`` → ``"0-3,8"``)."""
    ids = sorted(set(int(c) for c in cpus))
    if not ids:
        return ""
    parts = []
    start = prev = ids[0]
    for c in ids[1:]:
        if c == prev + 1:
            prev = c
            continue
        parts.append(f"{start}-{prev}" if prev != start else str(start))
        start = prev = c
    parts.append(f"{start}-{prev}" if prev != start else str(start))
    return ",".join(parts)


def node_facts_from_row(node) -> NodeFacts:
    """Build :class:`NodeFacts` from a :class:`deployments.models.Node` row and its GPU/NUMA rows."""
    return NodeFacts(
        name=node.name,
        hostname=node.hostname,
        cpu_count=node.cpu_count,
        memory_total_bytes=node.memory_total_bytes,
        gpus=[
            GpuFacts(
                index=g.index,
                uuid=g.uuid,
                name=g.name,
                memory_total_bytes=g.memory_total_bytes,
                pci_bus_id=g.pci_bus_id,
                numa_node=g.numa_node,
                compute_capability=g.compute_capability,
                cpu_affinity=g.cpu_affinity,
            )
            for g in node.gpus.all()
        ],
        numa_nodes=[
            NumaFacts(index=n.index, cpus=tuple(parse_cpulist(n.cpus)), memory_total_bytes=n.memory_total_bytes)
            for n in node.numa_nodes.all()
        ],
        tools=dict(node.tools or {}),
        driver_version=node.driver_version,
        cuda_version=node.cuda_version,
        nvml_status=nvml_status_from_dict(node.topology if isinstance(node.topology, dict) else {}),
        **gpu_count_from_dict(node.topology if isinstance(node.topology, dict) else {}),
        memory_source=memory_source_from_dict(node.topology if isinstance(node.topology, dict) else {}),
        **port_settings_from_dict(node.topology if isinstance(node.topology, dict) else {}),
    )
