"""Node pages: the list of registered nodes and one node's GPUs, NUMA nodes, tools and recipes,
with its live GPU tiles and host panel (websocket)."""
from __future__ import annotations

from django.conf import settings
from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from controlplane.realtime import node_group
from deployments import selectors
from deployments.models import Gpu, Node, NodeTelemetry, NumaNode
from deployments.nodes import node_gpu_status
from deployments.topology import parse_cpulist
from deployments.views.common import _agent_view, _gib, _heartbeat_clock, role_page


@role_page()
def node_list(request: HttpRequest) -> HttpResponse:
    """Registered nodes with GPU and NUMA counts (the GPU count with why it is 0 or unknown:
    :func:`deployments.nodes.node_gpu_status`), queue name and agent status (the last heartbeat
    ``12 s ago``, as every page gives a time's age, counted on by the page's script as on the
    node page: :func:`_heartbeat_clock`)."""
    now = timezone.now()
    rows = [
        {
            "node": n,
            "gpu": node_gpu_status(n),
            "numa_count": len(n.numa_nodes.all()),
            "gpu_names": sorted({g.name for g in n.gpus.all() if g.name}),
            "memory_gib": _gib(n.memory_total_bytes),
            "agent": _agent_view(n, now),
            "heartbeat": _heartbeat_clock(n, now),
        }
        for n in selectors.node_list()
    ]
    # The page re-reads the nodes as often as the agents heartbeat, at most once a second (ceiling.js).
    read_every_s = f"{max(1.0, settings.CEILING_AGENT_HEARTBEAT_S):g}"
    return render(request, "deployments/node_list.html", {"rows": rows, "read_every_s": read_every_s})


@role_page()
def node_detail(request: HttpRequest, name: str) -> HttpResponse:
    """One node: live tiles (per GPU: memory bar, utilization, power and temperature with
    sparklines, its processes; the host's CPU per NUMA node and memory) filled over the websocket
    from group ``node-<name>``; then the GPUs (index, name, memory in GiB, PCI bus id, NUMA
    node, compute capability), NUMA nodes with CPU lists, tools, queue name and agent status (the
    last heartbeat ``12 s ago``, as every page gives a time's age)."""
    node = get_object_or_404(
        Node.objects.prefetch_related(
            Prefetch("gpus", queryset=Gpu.objects.order_by("index")),
            Prefetch("numa_nodes", queryset=NumaNode.objects.order_by("index")),
        ),
        name=name,
    )
    gpus = [{"gpu": g, "memory_gib": _gib(g.memory_total_bytes)} for g in node.gpus.all()]
    numa = []
    for n in node.numa_nodes.all():
        try:
            cpu_count: int | None = len(parse_cpulist(n.cpus))
        except ValueError:
            cpu_count = None
        numa.append(
            {
                "numa": n,
                "cpu_count": cpu_count,
                "memory_gib": _gib(n.memory_total_bytes),
                "gpu_indices": [g.index for g in node.gpus.all() if g.numa_node == n.index],
            }
        )
    tools = sorted((node.tools or {}).items())
    now = timezone.now()
    return render(
        request,
        "deployments/node_detail.html",
        {
            "node": node,
            "gpus": gpus,
            "gpu": node_gpu_status(node),
            "numa": numa,
            "tools": tools,
            "memory_gib": _gib(node.memory_total_bytes),
            # a live memory figure exists once the agent samples (online) or ever did (stored
            # telemetry); the wall draws a node by the same rule
            "sampled": node.agent_online or NodeTelemetry.objects.filter(node_id=node.pk).exists(),
            "agent": _agent_view(node, now),
            "heartbeat": _heartbeat_clock(node, now),
            "recipes": node.recipes.order_by("name"),
            "live_group": node_group(node.name),
        },
    )
