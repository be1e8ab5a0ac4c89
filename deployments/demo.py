"""The demo's main job, as plain functions the ``demo`` command prints from.

``demo_deploy_and_prove`` deploys a recipe through the same service the UI and API use, waits for
the node agent to report it ready (polling the rows: rows are the truth), then sends one real
streamed chat completion to the deployment's entry URL (the router for PD) and measures it. What
it returns is what was observed, including failures with their reasons; nothing is assumed.

``demo_cpu_sharing`` says, before a recipe is swept, whether its CPU pinning overlaps the other
deployments on its node and whether the node has CPUs nobody is pinned to (on the 2-CPU demo
host it has none: the sims hold CPU 0 and CPU 1, so llama.cpp shares them).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import httpx

from deployments.choices import DEPLOYMENT_ACTIVE, DeploymentStatus
from deployments.models import Deployment, Recipe, recipe_name_shown
from deployments.selectors import deployment_processes
from deployments.services import deployment_create
from deployments.topology import format_cpulist, parse_cpulist


@dataclass
class StreamProof:
    """One streamed request: HTTP status, time to first content (s), total (s), content events,
    ``usage.completion_tokens`` from the server (None when absent), the text, or an error."""

    status: int | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    events: int = 0
    completion_tokens: int | None = None
    text: str = ""
    error: str = ""


@dataclass
class DeployProof:
    """What the demo saw for one recipe: the deployment row, seconds to ready, the processes'
    pinning as verified by the agent, and the streamed request through the entry URL."""

    recipe: str   # its name as shown (:func:`deployments.models.recipe_name_shown`)
    deployment_id: int | None = None
    status: str = ""
    reason: str = ""
    ready_after_s: float | None = None
    processes: list[dict] = field(default_factory=list)
    stream: StreamProof | None = None

    @property
    def ok(self) -> bool:
        pinned = all(p["pinning_verified"] is not False for p in self.processes)
        streamed = self.stream is not None and not self.stream.error and self.stream.events > 0
        return self.status == DeploymentStatus.READY and pinned and streamed


def stream_chat(*, url: str, model: str, max_tokens: int = 16, timeout_s: float = 60.0) -> StreamProof:
    """POST a streamed ``/v1/chat/completions`` (``ignore_eos``, usage requested) and time it.

    TTFT is the first event carrying ``delta.content`` (a role-only opening chunk is not
    output; see ``shared/design/metrics.md``).
    """
    proof = StreamProof()
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Say something about GPUs."}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    start = time.perf_counter()
    try:
        with httpx.Client(timeout=timeout_s) as client:
            with client.stream("POST", url.rstrip("/") + "/v1/chat/completions", json=body) as response:
                proof.status = response.status_code
                if response.status_code != 200:
                    proof.error = f"HTTP {response.status_code}: {response.read().decode(errors='replace')[:200]}"
                    return proof
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    chunk = json.loads(data)
                    if "error" in chunk:
                        proof.error = str(chunk["error"])[:200]
                        return proof
                    if chunk.get("usage"):
                        proof.completion_tokens = chunk["usage"].get("completion_tokens")
                    for choice in chunk.get("choices") or []:
                        content = (choice.get("delta") or {}).get("content")
                        if content:
                            now = time.perf_counter() - start
                            if proof.ttft_s is None:
                                proof.ttft_s = now
                            proof.e2e_s = now
                            proof.events += 1
                            proof.text += content
    except (httpx.HTTPError, ValueError) as exc:
        proof.error = f"{type(exc).__name__}: {exc}"
    if not proof.error and proof.events == 0:
        proof.error = "the stream carried no output"
    return proof


def demo_recipe_lines(*, base: str) -> list[str]:
    """The demo's list of recipes, one line each, by name: name (a stored secret's value in it,
    from a name saved before such values were refused there, masked as every read shows it),
    engine, topology, node, version and the recipe's dry-run page under ``base`` (the UI's URL)."""
    return [f"  {recipe_name_shown(recipe.name):20s} {recipe.engine:8s} {recipe.topology:6s} node={recipe.node.name:10s} "
            f"v{recipe.version}  {base}/recipes/{recipe.pk}/dry-run/"
            for recipe in Recipe.objects.select_related("node").order_by("name")]


def demo_deploy_and_prove(*, recipe: Recipe, user, timeout_s: float, progress=None) -> DeployProof:
    """Deploy ``recipe`` (or reuse its active deployment), wait up to ``timeout_s`` for ready,
    then stream one request through its entry URL. ``progress(text)`` gets status changes."""
    proof = DeployProof(recipe=recipe_name_shown(recipe.name))
    active = Deployment.objects.filter(recipe=recipe, node=recipe.node, status__in=DEPLOYMENT_ACTIVE).first()
    deployment = active or deployment_create(recipe=recipe, user=user)
    proof.deployment_id = deployment.pk
    start = time.monotonic()
    last = None
    while True:
        deployment.refresh_from_db()
        if deployment.status != last and progress:
            progress(f"  {proof.recipe}: {deployment.status}" + (f" ({deployment.reason})" if deployment.reason else ""))
        last = deployment.status
        if deployment.status not in (DeploymentStatus.PENDING, DeploymentStatus.STARTING):
            break
        if time.monotonic() - start > timeout_s:
            break
        time.sleep(0.25)
    proof.status = deployment.status
    proof.reason = deployment.reason
    if deployment.status == DeploymentStatus.READY:
        proof.ready_after_s = (
            (deployment.ready_at - deployment.created_at).total_seconds() if deployment.ready_at else None
        )
    for process in deployment_processes(deployment=deployment):
        proof.processes.append({
            "role": process.role,
            "pid": process.pid,
            "status": process.status,
            "cpus": process.cpus,
            "effective_cpus": process.effective_cpus,
            "effective_mems": process.effective_mems,
            "pin_method": process.pin_method,
            "pinning_verified": process.pinning_verified,
            "ports": process.ports,
        })
    if deployment.status == DeploymentStatus.READY and deployment.entry_url:
        model = (deployment.spec_snapshot or {}).get("served_model_name") or recipe.name
        proof.stream = stream_chat(url=deployment.entry_url, model=model)
    return proof


def _cpus(text: str) -> set[int]:
    try:
        return set(parse_cpulist(text))
    except ValueError:
        return set()


def demo_cpu_sharing(*, recipe: Recipe) -> str | None:
    """One line on whether ``recipe``'s pinned CPUs are shared with the other active deployments
    on its node, or None when the recipe pins no CPU.

    The recipe's CPUs are the union of ``spec.roles.<role>.cpus``; the node's CPUs come from its
    NUMA nodes (else ``0 .. cpu_count - 1``); another deployment uses what its processes were
    pinned to (``effective_cpus`` read back from ``/proc``, else the intended ``cpus``; an
    unpinned process, like the router, is not counted as holding a CPU). Three outcomes: no
    overlap; overlap while some node CPUs are held by nobody (the line names them, with the spec
    field to change); overlap with no CPU to spare, as on the 2-CPU demo host. Sweeps of
    deployments that share a CPU or GPU on a node run one at a time
    (:func:`benchmarks.selectors.sweep_sharing_blocker`: a second waits, pending, for the first to
    end), so no other sweep loads the shared CPUs while this one is measured.
    """
    roles = (recipe.spec or {}).get("roles") or {}
    mine: set[int] = set()
    for role in roles.values():
        if isinstance(role, dict) and isinstance(role.get("cpus"), str):
            mine |= _cpus(role["cpus"])
    if not mine:
        return None
    node = recipe.node
    node_cpus: set[int] = set()
    for numa in node.numa_nodes.all():
        node_cpus |= _cpus(numa.cpus)
    node_cpus = node_cpus or set(range(node.cpu_count))
    others = (Deployment.objects.filter(node=node, status__in=DEPLOYMENT_ACTIVE).exclude(recipe=recipe)
              .select_related("recipe").order_by("recipe__name", "pk"))
    held: set[int] = set()
    sharers: list[str] = []
    for other in others:
        parts = []
        for process in deployment_processes(deployment=other):
            cpus = _cpus(process.effective_cpus or process.cpus)
            held |= cpus
            if cpus & mine:
                parts.append(f"{process.role} on CPU{'s' if len(cpus) > 1 else ''} {format_cpulist(cpus)}")
        if parts:
            sharers.append(f"{other.deployed_recipe_label()} ({', '.join(parts)})")
    label = f"{recipe_name_shown(recipe.name)} ({'sim' if recipe.engine == 'sim' else recipe.get_engine_display()})"
    if not sharers:
        return f"{label} is pinned to CPUs {format_cpulist(mine)}, which no other deployment on {node.name} uses."
    shared = format_cpulist(mine & held)
    free = node_cpus - held
    line = f"{label} shares CPU{'s' if len(mine & held) > 1 else ''} {shared} with {' and '.join(sharers)}"
    if free:
        role = next(iter(roles)) if len(roles) == 1 else "<role>"
        return (f"{line}; CPUs {format_cpulist(free)} of {node.name} are pinned to nothing: set "
                f"spec.roles.{role}.cpus to them to measure it alone.")
    return (f"{line}: {node.name} has {len(node_cpus)} CPU{'s' if len(node_cpus) != 1 else ''} and none is free "
            f"of them, so they share; sweeps of deployments that share a CPU run one at a time (a second waits "
            f"for the first to end), so no other sweep loads those CPUs while one is measured.")
