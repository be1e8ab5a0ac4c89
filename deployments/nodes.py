"""Node services: register a host's discovered topology, record agent heartbeats, and load
the seed machine's facts.

A :class:`~deployments.models.Node` row per GPU (or CPU-only) host; its agent consumes the
Celery queue ``node.<name>`` (:attr:`Node.queue_name`). The normalised facts live in the node's
:class:`~deployments.models.Gpu` and :class:`~deployments.models.NumaNode` rows; the full
discovery result is kept in ``Node.topology`` for audit.
"""
from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from controlplane.errors import InvalidInput, NotFound
from controlplane.jsonsafe import json_spelled
from deployments.discovery import NVML_OK, discover_node
from deployments.models import Gpu, Node, NumaNode, digits_alone_problem, slug_validator
from deployments.topology import NodeFacts, format_cpulist, gpu_count_from_dict, nvml_status_from_dict

#: The seed machine (the project's motivating 8-GPU host), as discovery would report it.
SEED_FACTS_PATH = Path(__file__).resolve().parent / "data" / "seed-8gpu.json"


def _facts_errors(facts: NodeFacts) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    try:
        slug_validator(facts.name)
    except ValidationError as exc:
        errors["name"] = list(exc.messages)
    else:
        if problem := digits_alone_problem(facts.name, read_as="/api/nodes/<digits>/ reads digits as a node's id",
                                           example_prefix="node"):
            errors["name"] = [problem]
    gpu_indices = [g.index for g in facts.gpus]
    if len(set(gpu_indices)) != len(gpu_indices):
        errors["gpus"] = [f"duplicate GPU indices in {sorted(gpu_indices)}"]
    numa_indices = [n.index for n in facts.numa_nodes]
    if len(set(numa_indices)) != len(numa_indices):
        errors["numa_nodes"] = [f"duplicate NUMA node indices in {sorted(numa_indices)}"]
    for gpu in facts.gpus:
        if gpu.numa_node is not None and gpu.numa_node not in set(numa_indices):
            errors.setdefault(f"gpus.{gpu.index}.numa_node", []).append(
                f"NUMA node {gpu.numa_node} is not one of this node's NUMA nodes {sorted(numa_indices)}"
            )
    return errors


def node_register(*, facts: NodeFacts) -> Node:
    """Create or update the Node named ``facts.name`` from discovered facts.

    In one transaction: upserts the Node (hostname, CPU count, memory in bytes, tools, driver and
    CUDA versions, ``topology = facts.to_dict()``, ``discovered_at = now``), upserts one Gpu row
    per GPU index and one NumaNode row per NUMA index, and deletes the rows of GPUs and NUMA
    nodes no longer present. Rows are matched by index, so registering the same facts twice
    leaves the same rows (same primary keys) behind. Agent heartbeat fields are untouched.

    Raises:
        InvalidInput: the name is not a node slug or is digits alone (the API reads digits as
            a node's id), GPU or NUMA indices repeat, or a GPU names a
            NUMA node the host does not have (keys ``name``, ``gpus``, ``numa_nodes``,
            ``gpus.<index>.numa_node``).
    """
    errors = _facts_errors(facts)
    if errors:
        raise InvalidInput(errors)
    with transaction.atomic():
        node, _ = Node.objects.update_or_create(
            name=facts.name,
            defaults={
                "hostname": facts.hostname,
                "cpu_count": facts.cpu_count,
                "memory_total_bytes": facts.memory_total_bytes,
                "tools": dict(facts.tools),
                "driver_version": facts.driver_version,
                "cuda_version": facts.cuda_version,
                "topology": facts.to_dict(),
                "discovered_at": timezone.now(),
            },
        )
        node.numa_nodes.exclude(index__in=[n.index for n in facts.numa_nodes]).delete()
        for numa in facts.numa_nodes:
            NumaNode.objects.update_or_create(
                node=node,
                index=numa.index,
                defaults={"cpus": format_cpulist(numa.cpus), "memory_total_bytes": numa.memory_total_bytes},
            )
        node.gpus.exclude(index__in=[g.index for g in facts.gpus]).delete()
        for gpu in facts.gpus:
            Gpu.objects.update_or_create(
                node=node,
                index=gpu.index,
                defaults={
                    "uuid": gpu.uuid,
                    "name": gpu.name,
                    "memory_total_bytes": gpu.memory_total_bytes,
                    "pci_bus_id": gpu.pci_bus_id,
                    "numa_node": gpu.numa_node,
                    "compute_capability": gpu.compute_capability,
                    "cpu_affinity": gpu.cpu_affinity,
                },
            )
    return node


#: ``gpu_status`` values of :func:`node_gpu_status`.
GPU_STATUS_NOT_REPORTED = "not_reported"
GPU_STATUS_FOUND = "found"
GPU_STATUS_NONE_FOUND = "none_found"
GPU_STATUS_NVML_UNAVAILABLE = "nvml_unavailable"
GPU_STATUS_NONE_ON_PCI = "none_on_pci"
GPU_STATUS_COUNT_UNKNOWN = "count_unknown"
GPU_STATUS_NONE_RECORDED = "none_recorded"
GPU_STATUSES = (GPU_STATUS_NOT_REPORTED, GPU_STATUS_FOUND, GPU_STATUS_NONE_FOUND,
                GPU_STATUS_NVML_UNAVAILABLE, GPU_STATUS_NONE_ON_PCI, GPU_STATUS_COUNT_UNKNOWN,
                GPU_STATUS_NONE_RECORDED)


def node_gpu_status(node: Node) -> dict:
    """What is known about ``node``'s GPU count, in the words every page and the API use.

    Returns ``{"count", "status", "reason", "text"}``:

    * ``not_reported``: the node was never discovered (``discovered_at`` unset): count None,
      text ``"unknown (not reported yet)"``;
    * ``found``: discovery recorded GPUs: count N, text ``"8 GPUs"``; when some NVML calls failed
      after the count (a lost GPU, an unsupported query), ``reason`` names them and the text ends
      ``"(some NVML queries failed: GPU 1: nvmlDeviceGetName failed: Unknown Error)"``;
    * ``none_found``: NVML answered and counted none: ``"0 GPUs (NVML found none)"``;
    * ``nvml_unavailable``: NVML gave no count (no library, no driver, a failed
      ``nvmlDeviceGetCount``; ``reason`` is its text) and the PCI bus in sysfs lists N NVIDIA
      GPUs: count N, ``"2 NVIDIA GPUs on the PCI bus, not usable: NVML not available: Driver Not
      Loaded"``; the node has no usable GPU (no GPU rows);
    * ``none_on_pci``: NVML gave no count and the PCI bus lists no NVIDIA GPU: count 0,
      ``"0 GPUs (no NVIDIA PCI device; NVML not available: NVML Shared Library Not Found)"``;
    * ``count_unknown``: NVML gave no count and the PCI bus could not be read (or an older node
      agent did not count it): count None, ``"GPU count unknown — NVML not available: <reason>"``;
    * ``none_recorded``: discovery recorded no GPU and no NVML status (GPUs read from
      ``nvidia-smi -q -x``, facts written by hand, an older node agent):
      ``"0 GPUs (no NVML status recorded)"``.

    Reads ``node.gpus.all()`` (prefetch it for lists) and ``node.topology``'s ``nvml_status`` and
    ``pci_gpu_count``.
    """
    if node.discovered_at is None:
        return {"count": None, "status": GPU_STATUS_NOT_REPORTED, "reason": None, "text": "unknown (not reported yet)"}
    count = len(node.gpus.all())
    topology = node.topology if isinstance(node.topology, dict) else {}
    nvml = nvml_status_from_dict(topology)
    if count:
        text = f"{count} GPU{'s' if count != 1 else ''}"
        if nvml and nvml != NVML_OK:
            # Some NVML calls failed after it counted the GPUs: the count stands, the reason is shown.
            return {"count": count, "status": GPU_STATUS_FOUND, "reason": nvml,
                    "text": f"{text} (some NVML queries failed: {nvml})"}
        return {"count": count, "status": GPU_STATUS_FOUND, "reason": None, "text": text}
    if nvml == NVML_OK:
        return {"count": 0, "status": GPU_STATUS_NONE_FOUND, "reason": None, "text": "0 GPUs (NVML found none)"}
    if nvml:
        # NVML gave no count; the PCI bus in sysfs, read without a driver, is the only measure.
        pci = gpu_count_from_dict(topology)["pci_gpu_count"]
        if pci is None:
            return {"count": None, "status": GPU_STATUS_COUNT_UNKNOWN, "reason": nvml,
                    "text": f"GPU count unknown — NVML not available: {nvml}"}
        if pci == 0:
            return {"count": 0, "status": GPU_STATUS_NONE_ON_PCI, "reason": nvml,
                    "text": f"0 GPUs (no NVIDIA PCI device; NVML not available: {nvml})"}
        return {"count": pci, "status": GPU_STATUS_NVML_UNAVAILABLE, "reason": nvml,
                "text": f"{pci} NVIDIA GPU{'s' if pci != 1 else ''} on the PCI bus, not usable: "
                        f"NVML not available: {nvml}"}
    return {"count": 0, "status": GPU_STATUS_NONE_RECORDED, "reason": None, "text": "0 GPUs (no NVML status recorded)"}


def node_heartbeat(*, name: str, pid: int) -> None:
    """Record that the agent of node ``name`` (process ``pid``) is alive now.

    A conditional UPDATE: it never moves ``agent_heartbeat_at`` backwards, so a delayed
    heartbeat message arriving after a newer one changes nothing; it clears ``agent_stopped_at``
    (the agent is back). ``updated_at`` is left alone
    (a heartbeat is not an edit of the node). A heartbeat that brings the agent online (its
    first, or the first after a clean stop or a silence past ``CEILING_HEARTBEAT_TIMEOUT_S``:
    :attr:`Node.agent_online` turns true) is announced on the nodes' roster group
    (:func:`deployments.telemetry.events.node_roster_broadcast`, ``online``), so the wall
    redraws its tiles at once; the first UPDATE takes only such a row, the second any other,
    so a heartbeat costs one or two statements.

    Raises:
        NotFound: no node has that name.
    """
    from deployments.telemetry.events import node_roster_broadcast

    now = timezone.now()
    rows = Node.objects.filter(name=name)
    beat = {"agent_heartbeat_at": now, "agent_pid": pid, "agent_stopped_at": None}
    silent_since = now - timedelta(seconds=settings.CEILING_HEARTBEAT_TIMEOUT_S)
    offline = (Q(agent_heartbeat_at__isnull=True) | Q(agent_heartbeat_at__lt=silent_since)
               | Q(agent_stopped_at__gte=F("agent_heartbeat_at"), agent_heartbeat_at__lte=now))
    if rows.filter(offline).update(**beat):
        node_roster_broadcast(node_name=name, event="online")
        return
    updated = rows.filter(agent_heartbeat_at__lte=now).update(**beat)
    if not updated and not rows.exists():
        raise NotFound(f"no node named {json_spelled(name)}")


def node_agent_stopped(*, name: str, pid: int) -> bool:
    """Record that the agent of node ``name`` (process ``pid``) shut down cleanly, so the node
    reads offline at once instead of after ``CEILING_HEARTBEAT_TIMEOUT_S``. Only the agent that
    holds the row (``agent_pid == pid``) can mark it: a newer agent that already took over is
    left online. Returns whether the row was marked."""
    now = timezone.now()
    return bool(Node.objects.filter(name=name, agent_pid=pid).update(agent_stopped_at=now))


def node_local_register() -> Node:
    """Discover this host (sysfs, NVML, ``nvidia-smi topo -m``) and register it as node
    ``settings.CEILING_NODE_NAME``.

    Raises:
        deployments.discovery.DiscoveryError: this host's sysfs is malformed.
        InvalidInput: ``CEILING_NODE_NAME`` is not a valid node name.
    """
    return node_register(facts=with_engine_python(discover_node(name=settings.CEILING_NODE_NAME)))


def with_engine_python(facts: NodeFacts) -> NodeFacts:
    """``facts`` with ``tools["python"]`` set to the interpreter this host's agent starts Python
    engines with (``settings.CEILING_EXECUTABLES["python"]``, i.e. ``CEILING_ENGINE_PYTHON``), so a
    launch plan rendered elsewhere (the control plane's dry run of a remote node) shows the argv
    the node's agent will run, not the control plane's own interpreter. Informational only: the
    agent launches with its own settings, never with a path read back from the node row."""
    facts.tools = {**facts.tools, "python": settings.CEILING_EXECUTABLES["python"]}
    return facts


def seed_node_facts() -> NodeFacts:
    """Facts of the seed machine ``seed-8gpu`` from ``deployments/data/seed-8gpu.json``.

    The machine of the project's motivating story: 8x NVIDIA RTX PRO 6000 Blackwell Server
    Edition (compute capability 12.0, 97887 MiB each), GPU0-3 and CPUs 0-31 on NUMA node 0,
    GPU4-7 and CPUs 32-63 on NUMA node 1. The sysfs fixture ``deployments/tests/fixtures/seed8``
    describes the same host, and a test keeps the two in agreement.
    """
    return NodeFacts.from_dict(json.loads(SEED_FACTS_PATH.read_text()))
