"""``manage.py discover_node``: show this host's topology (GPUs, NUMA nodes, tools) and,
with ``--register``, store it as a Node.

Examples::

    manage.py discover_node                       # table for this host
    manage.py discover_node --json --register     # JSON, and upsert node CEILING_NODE_NAME
    manage.py discover_node --name h200x2 --sysfs-root capture/sys \\
        --nvidia-smi-xml capture/nvidia-smi-q.xml --topo capture/topo.txt --register
"""
from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError, CommandParser

from controlplane.commands import CeilingCommand
from controlplane.errors import InvalidInput
from deployments.discovery import DiscoveryError, discover_node
from deployments.nodes import node_register
from deployments.topology import NodeFacts, format_cpulist

_GIB = 1024**3
_MIB = 1024**2


def _read(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc}") from exc


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*headers), fmt.format(*("-" * w for w in widths))] + [fmt.format(*r) for r in rows]
    return [line.rstrip() for line in lines]


def format_facts_table(facts: NodeFacts) -> str:
    """Human-readable summary of :class:`NodeFacts`: node line, NUMA table, GPU table, tools.

    Memory is shown in GiB for NUMA nodes and MiB for GPUs (the unit ``nvidia-smi`` uses).
    """
    lines = [
        f"node {facts.name} (host {facts.hostname or '?'}, queue node.{facts.name})",
        f"  {facts.cpu_count} CPUs, {facts.memory_total_bytes / _GIB:.1f} GiB memory, "
        f"driver {facts.driver_version or '-'}, CUDA {facts.cuda_version or '-'}",
        "",
    ]
    numa_rows = [
        [str(n.index), format_cpulist(n.cpus) or "-", f"{n.memory_total_bytes / _GIB:.1f}" if n.memory_total_bytes else "-"]
        for n in facts.numa_nodes
    ]
    lines += _table(["NUMA", "CPUs", "memory GiB"], numa_rows) + [""]
    if facts.gpus:
        gpu_rows = [
            [
                str(g.index),
                g.name or "?",
                str(g.memory_total_bytes // _MIB) if g.memory_total_bytes else "-",
                g.compute_capability or "-",
                g.pci_bus_id or "-",
                "-" if g.numa_node is None else str(g.numa_node),
                g.cpu_affinity or "-",
                g.uuid or "-",
            ]
            for g in facts.gpus
        ]
        lines += _table(["GPU", "name", "MiB", "CC", "PCI bus id", "NUMA", "CPU affinity", "UUID"], gpu_rows)
    else:
        lines.append("no GPUs (CPU-only node)")
    lines.append("")
    lines += [f"{tool}: {path or 'not found'}" for tool, path in sorted(facts.tools.items())]
    return "\n".join(lines)


class Command(CeilingCommand):
    help = "Discover this host's GPUs, NUMA nodes and tools; print them, and register the node with --register."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", default=None, help="node name (default: CEILING_NODE_NAME)")
        parser.add_argument("--json", action="store_true", help="print the facts as JSON instead of a table")
        parser.add_argument("--register", action="store_true", help="create or update the Node row from the facts")
        parser.add_argument("--sysfs-root", default="/sys", help="root of a sysfs tree (default /sys)")
        parser.add_argument(
            "--nvidia-smi-xml", default=None, help="file with `nvidia-smi -q -x` output to use instead of NVML"
        )
        parser.add_argument("--topo", default=None, help="file with `nvidia-smi topo -m` output")

    def handle(self, *args, **options) -> None:
        name = options["name"] or settings.CEILING_NODE_NAME
        try:
            facts = discover_node(
                name=name,
                sysfs_root=Path(options["sysfs_root"]),
                topo_text=_read(options["topo"]),
                nvidia_smi_xml=_read(options["nvidia_smi_xml"]),
            )
        except DiscoveryError as exc:
            raise CommandError(str(exc)) from exc
        if options["json"]:
            self.stdout.write(json.dumps(facts.to_dict(), indent=2))
        else:
            self.stdout.write(format_facts_table(facts))
        if options["register"]:
            try:
                node = node_register(facts=facts)
            except InvalidInput as exc:
                raise CommandError(str(exc)) from exc
            # To stderr, so --json output stays parseable.
            self.stderr.write(
                f"registered node {node.name} (id {node.pk}): {node.gpus.count()} GPUs, "
                f"{node.numa_nodes.count()} NUMA nodes, queue {node.queue_name}"
            )
