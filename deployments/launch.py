"""Launch plans: a recipe on a node rendered into the exact processes to start (dry-run).

:func:`launch_plan_render` is pure: no database, no filesystem, no network. It re-validates
the spec with :func:`deployments.recipes.recipe_validate` (so a raw or stale spec is
normalised, and a recipe that no longer fits its node fails with :class:`InvalidInput`; a spec
with ``kernels`` references reads the registered kernel packages for that), then
asks the engine adapter (:mod:`deployments.engines`) for each role's bare argv and wraps it
with the pinning the node supports:

* numactl present (``node.tools["numactl"]``): ``[numactl, --physcpubind=CPUS | --cpunodebind=N,
  --membind=N | --localalloc, --, engine argv...]``, pin method ``numactl``; argv[0] is
  ``settings.CEILING_EXECUTABLES["numactl"]``, never a path from the node row.
* numactl absent: the bare engine argv; the supervisor applies ``cpus`` with
  ``sched_setaffinity`` (pin method ``sched_setaffinity``) and cannot apply a memory policy,
  which the plan records in ``warnings``.

Executables: the node agent renders with :func:`agent_executables` (this host's
``settings.CEILING_EXECUTABLES``) and starts only programs of :func:`agent_executable_allowlist`;
``node.tools`` is what the agent reported at registration and is never executed. A plan rendered
without ``executables`` (a dry run, possibly of another host) shows the interpreter the node's
agent reported (``node.tools["python"]``) so the argv reads as that host will run it.

Processes come in start order: prefill, decode, then the router (it needs its workers), or
the single server. Each process's ``env`` holds only what Ceiling sets (GPU selection, the
engine's own variables, the recipe's env and, only when ``secret_values`` is given, the
secrets); ``env_redacted`` and :meth:`ProcessSpec.to_dict` always mask secrets.
"""
from __future__ import annotations

import ipaddress
import os
import posixpath
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from controlplane.errors import InvalidInput
from controlplane.jsonsafe import json_spelled
from controlplane.redaction import REDACTED, redact_text, secret_values_mask
from deployments.engines import engine_get
from deployments.engines.base import RenderContext, http_url, url_host
from deployments.recipes import recipe_validate, recipe_warnings
from deployments.topology import NodeFacts, format_cpulist, parse_cpulist
from kernels.references import kernel_refs_apply

START_ORDER = ("prefill", "decode", "router", "single")

#: The recipe flag that sets a port kind of a launch plan which the recipe need not give (Ceiling
#: fills in a PD router's ``prometheus-port``: :func:`deployments.recipes._router_metrics_port_fill`),
#: spelled as the user writes it, so a message about that port says what to change.
PORT_KIND_FLAGS = {"metrics": "--prometheus-port"}


#: Bind addresses that listen on every interface: a client on the same host reaches such a server
#: through loopback, one elsewhere through the host's own address.
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def client_host(bind_host: str, *, node_name: str, address: str) -> tuple[str, str]:
    """The host a client of this host (a user's ``curl``, the control plane's benchmark worker)
    connects to for a server bound to ``bind_host`` on node ``node_name``, whose recorded address
    is ``address`` (``Node.hostname``: the host name its agent reported at registration), spelled
    for a URL; and ``""``, or ``("", why)`` when there is none to give.

    A wildcard bind (:data:`WILDCARD_HOSTS`) is reached through loopback on its own host, so on
    this host (``settings.CEILING_NODE_NAME``, the node its local agent registers) it is
    ``127.0.0.1`` (``[::1]`` for ``::``); on another node loopback would be this host, not that
    node, so it is the node's address, and a node that recorded none has no URL to give (``why``
    says so and what to do). Any other bind address is connected to as given (an IPv6 literal
    bracketed, :func:`deployments.engines.base.url_host`): a server bound to ``127.0.0.1``
    on another node answers only there. Entry URLs (the plan's, a deployment's) and the URLs the
    benchmark worker sends to a node's processes (:func:`url_from_here`) all follow this rule; a
    node agent probes its own processes through loopback, as the plan's health URLs read."""
    if bind_host not in WILDCARD_HOSTS or node_name == settings.CEILING_NODE_NAME:
        return url_host(bind_host), ""
    if address:
        return url_host(address), ""
    return "", (f"node {json_spelled(node_name)} has no recorded address (the host name its node agent reports "
                f"when it registers), so a server bound to {bind_host or '0.0.0.0'} there has no URL from this host "
                "(127.0.0.1 here is this host, not that node): start the node's agent there (manage.py node_agent "
                f"--name {node_name}) or bind the role's host to the node's own address")


def _is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind address) is this machine's loopback: ``localhost``, 127.0.0.0/8, ``::1``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_from_here(url: str, *, bind_host: str, node_name: str, address: str) -> tuple[str, str]:
    """``url``, a URL of a server on node ``node_name`` as the node itself reaches it (a plan's
    health URL, a process row's: loopback for a wildcard bind), as this host reaches it: its host
    replaced by :func:`client_host` of the server's ``bind_host``; ``("", why)`` when there is
    none; ``url`` unchanged when it has no host."""
    parts = urlsplit(url)
    if not parts.hostname:
        return url, ""
    host, why = client_host(bind_host, node_name=node_name, address=address)
    if why:
        return "", why
    return parts._replace(netloc=f"{host}:{parts.port}" if parts.port else host).geturl(), ""


def port_kind_words(kind: str) -> str:
    """A port kind of :attr:`ProcessSpec.ports` as pages and messages write it, in words:
    ``http``, ``bootstrap``, ``side channel`` (the key ``side_channel``), ``metrics``."""
    return kind.replace("_", " ")


def port_kind_text(role: str, kind: str) -> str:
    """How a message names port ``kind`` of a ``role`` process: ``router http port``,
    ``prefill side channel port``, ``router metrics port, --prometheus-port`` (the flag that sets
    it, :data:`PORT_KIND_FLAGS`)."""
    flag = PORT_KIND_FLAGS.get(kind)
    return f"{role} {port_kind_words(kind)} port" + (f", {flag}" if flag else "")


def port_reason_named(kind: str, port: int, reason: str) -> str:
    """``reason`` (``port 31081 on 127.0.0.1 is already in use by pid 4121 (python3)``, as
    :func:`deployments.supervisor.procfs.port_busy_reason` words it) naming the port's kind, and
    the flag that sets it as the API's 409 and the dry-run name it (:data:`PORT_KIND_FLAGS`):
    ``metrics port 31081 (--prometheus-port) on 127.0.0.1 is already in use by ...``,
    ``side channel port 5600 on ...``. The http port, the one every process has, is named
    as ``reason`` names it."""
    if kind == "http":
        return reason
    head = f"port {port}"
    flag = PORT_KIND_FLAGS.get(kind)
    named = f"{port_kind_words(kind)} {head}" + (f" ({flag})" if flag else "")
    return named + reason[len(head):] if reason.startswith(head) else f"{port_kind_words(kind)} {reason}"


@dataclass
class ProcessSpec:
    """One process of a launch plan.

    ``argv``: the full argv list (pinning wrapper + engine argv; ``wrapper`` is the wrapper part
    alone, empty without numactl). ``env``: variables Ceiling sets on top of the agent's
    environment, with secret values only when the plan was rendered with ``secret_values``;
    ``env_redacted``: the same with secrets as ``***redacted***`` (what pages, logs and rows
    store); ``secret_env``: env name → secret name. ``cpus``: intended CPU list (cpulist
    syntax, "" = unpinned); ``mem_nodes``: intended memory NUMA nodes ("" = no policy);
    ``numa_node``: the NUMA node the process lives on, when there is one; ``pin_method``:
    ``numactl`` | ``sched_setaffinity`` | ``none``. ``gpu_ids``: physical (NVML) GPU indices,
    which ``CUDA_VISIBLE_DEVICES`` lists. ``ports``: ``{"http": P, "bootstrap": B,
    "side_channel": S, "metrics": M}`` as applicable. ``readiness``: ordered checks, each a
    dict with ``kind`` (``process_alive``, ``http``, ``generate``, ``router_workers``) and,
    for HTTP kinds, ``method``/``url``/``json``/``expect``.
    """

    role: str
    ordinal: int
    argv: list[str]
    env: dict[str, str]
    env_redacted: dict[str, str]
    secret_env: dict[str, str]
    wrapper: list[str]
    cpus: str
    mem_nodes: str
    numa_node: int | None
    pin_method: str
    gpu_ids: list[int]
    ports: dict[str, int]
    host: str
    health_url: str
    generate_url: str
    readiness: list[dict]
    startup_timeout_s: int
    stop_grace_s: int

    def argv_shown(self) -> list[str]:
        """``argv`` as pages, the API and the dry-run show it: any stored secret's value masked."""
        return [secret_values_mask(a) for a in self.argv]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view for pages, the API and logs: ``env`` is the redacted env, passed through
        the log redactor once more (a stored secret's value pasted as a plain value is masked
        there too); a text the process does not have (``cpus``, ``mem_nodes``, ``generate_url``
        ``""`` here) is null."""
        return {
            "role": self.role,
            "ordinal": self.ordinal,
            # a stored secret's value in a plain flag (a recipe saved before such values were
            # refused) is masked
            "argv": self.argv_shown(),
            "argv_shell": shlex.join(self.argv_shown()),
            "env": {k: redact_text(v) for k, v in self.env_redacted.items()},
            "secret_env": dict(self.secret_env),
            "wrapper": list(self.wrapper),
            "cpus": self.cpus or None,  # null when unpinned or without a memory policy, as /api/processes/
            "mem_nodes": self.mem_nodes or None,
            "numa_node": self.numa_node,
            "pin_method": self.pin_method,
            "gpu_ids": list(self.gpu_ids),
            "ports": dict(self.ports),
            "host": self.host,
            "health_url": self.health_url or None,
            "generate_url": self.generate_url or None,  # null when absent, as /api/processes/
            "readiness": [dict(r) for r in self.readiness],
            "startup_timeout_s": self.startup_timeout_s,
            "stop_grace_s": self.stop_grace_s,
        }


@dataclass
class LaunchPlan:
    """Everything needed to start a recipe on a node: processes in start order, the URL
    clients use (router or single server) as this host reaches it (:func:`client_host`: a
    wildcard bind on another node through that node's address; the processes' health URLs are
    as the node agent probes them, on the node), restart policy, timeouts and warnings: settings
    the recipe opted into that cost something (GPUs on another NUMA node under
    ``allow_cross_numa``, ``trust-remote-code``; see
    :func:`deployments.recipes.recipe_warnings`), then a memory binding that cannot be applied
    without numactl, and an entry URL that cannot be given."""

    engine: str
    topology: str
    node: str
    served_model_name: str
    entry_url: str
    processes: list[ProcessSpec]
    restart: dict
    startup_timeout_s: int
    stop_grace_s: int
    warnings: list[str] = field(default_factory=list)
    #: why ``entry_url`` is "" (:func:`client_host`: a node without a recorded address), also in ``warnings``
    entry_url_problem: str = ""
    #: the node's recorded address (``Node.hostname``) when the plan was rendered
    node_address: str = ""

    def health_url_from_here(self, process: ProcessSpec, url: str | None = None) -> tuple[str, str]:
        """``process``'s health URL (or ``url``, another of its URLs, such as its generate URL) as
        a dry-run shows it, and a note: as this host reaches it (:func:`url_from_here`) with the
        URL its node agent probes on the node beside it where the two differ (a wildcard bind on
        another node), or the probed URL with a note saying where it answers (a loopback bind on
        another node: there only; no URL from here: why). No note on this host, where the two are
        the same."""
        probed = process.health_url if url is None else url
        if not probed or self.node == settings.CEILING_NODE_NAME:
            return probed, ""
        here, why = url_from_here(probed, bind_host=process.host, node_name=self.node, address=self.node_address)
        if why:
            return probed, (f"answers on node {self.node}, where its node agent probes it; this host has no URL "
                            "for it: the node has no recorded address (see the warnings)")
        if here != probed:
            return here, f"its node agent probes {probed} on node {self.node}"
        if process.host not in WILDCARD_HOSTS and _is_loopback(process.host):
            return probed, (f"bound to {process.host}: it answers on node {self.node} only, where its node agent "
                            "probes it")
        return probed, ""

    def process(self, role: str) -> ProcessSpec:
        """The (first) process of ``role``; ``KeyError`` when the plan has none."""
        for p in self.processes:
            if p.role == role:
                return p
        raise KeyError(role)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, always redacted."""
        return {
            "engine": self.engine,
            "topology": self.topology,
            "node": self.node,
            "served_model_name": self.served_model_name,
            "entry_url": self.entry_url or None,  # null when this host has no URL for it (see warnings)
            "processes": [p.to_dict() for p in self.processes],
            "restart": dict(self.restart),
            "startup_timeout_s": self.startup_timeout_s,
            "stop_grace_s": self.stop_grace_s,
            "warnings": list(self.warnings),
        }


def paths_escaping_roots(plan: LaunchPlan, model_roots) -> list[str]:
    """Problems of ``plan``'s paths as the files lie on this host: every argv item and env value
    that lies (as text) under one of ``model_roots`` must still lie under one once symbolic links
    are resolved (:func:`os.path.realpath`). Recipe validation is lexical, since a model path
    names a file on the node, not on the control plane; the node agent calls this before it
    spawns, so a link such as ``<root>/etc_link -> /etc`` cannot hand an engine a file outside the
    roots. Returns one message per path, ``[]`` when every path stays inside."""
    roots = [posixpath.normpath(str(r)).rstrip("/") for r in model_roots]
    real_roots = [os.path.realpath(r) for r in roots]
    problems: list[str] = []
    seen: set[str] = set()
    for spec in plan.processes:
        for value in [*spec.argv, *spec.env.values()]:
            if not isinstance(value, str) or value in seen:
                continue
            if not any(value.startswith(r + "/") for r in roots):
                continue
            seen.add(value)
            real = os.path.realpath(value)
            if not any(real == r or real.startswith(r.rstrip("/") + "/") for r in real_roots):
                problems.append(f"{value} resolves to {real} through a symbolic link, outside the model roots "
                                f"({', '.join(roots)}); {spec.role} was not started")
    return problems


def agent_executables() -> dict[str, str]:
    """The executables the node agent renders launch plans with: a copy of this host's
    ``settings.CEILING_EXECUTABLES``. Never a path from the database."""
    return dict(settings.CEILING_EXECUTABLES)


def agent_executable_allowlist() -> frozenset[str]:
    """Programs the node agent may start (argv[0], and the program numactl wraps): the values
    of ``settings.CEILING_EXECUTABLES`` and the agent's own interpreter (``sys.executable``).
    :func:`deployments.supervisor.process_spawn` resolves them on the agent's ``PATH``."""
    return frozenset({*settings.CEILING_EXECUTABLES.values(), sys.executable})


def launch_plan_render(
    *,
    engine: str,
    topology: str,
    spec: dict,
    node: NodeFacts,
    secret_values: dict[str, str] | None = None,
    executables: Mapping[str, str] | None = None,
) -> LaunchPlan:
    """Render ``spec`` (normalised or raw) for ``engine``/``topology`` on ``node`` into a plan.

    ``secret_values`` maps a secret *name* to its value; when given, every secret the spec
    references must be present (else :class:`InvalidInput` at ``spec.secrets.<ENV>``) and the
    values appear in :attr:`ProcessSpec.env` of the engine workers (never of the router, which
    needs none) and nowhere else. Callers that log or display should use ``to_dict`` /
    ``env_redacted`` and register values with
    :func:`controlplane.redaction.register_secret_value` before starting processes.

    ``executables`` (program name → path) is what argv[0] and the numactl wrapper are taken
    from; the node agent passes :func:`agent_executables`, so what it starts never depends on
    the node row. Without it (a dry run) ``settings.CEILING_EXECUTABLES`` is used with the
    interpreter the node's agent reported at registration (``node.tools["python"]``): a plan
    rendered here for another host shows what that host will run.
    Raises :class:`InvalidInput` for a spec that does not validate on ``node``.
    """
    norm = recipe_validate(engine=engine, topology=topology, spec=spec, node=node)
    adapter = engine_get(engine)
    if executables is not None:
        executables = dict(executables)
    else:
        executables = dict(settings.CEILING_EXECUTABLES)
        if node.tools.get("python"):
            executables["python"] = node.tools["python"]
    # Accepted-but-costly settings (cross-NUMA GPUs, trust-remote-code) come first; the
    # pinning loop below adds what the node cannot apply.
    warnings: list[str] = recipe_warnings(spec=norm, node=node)

    secret_env = norm["secrets"]
    if secret_values is not None:
        missing = {env: name for env, name in secret_env.items() if name not in secret_values}
        if missing:
            raise InvalidInput({f"spec.secrets.{env}": [f"secret {json_spelled(name)} has no value"] for env, name in missing.items()})

    processes: list[ProcessSpec] = []
    for role_name in START_ORDER:
        role = norm["roles"].get(role_name)
        if role is None:
            continue
        is_router = role_name == "router"
        cpus, mem_nodes, numa_node, mode_argv = _pinning_intent(role, node)
        ctx = RenderContext(spec=norm, topology=topology, role_name=role_name, role=role,
                            executables=executables, cpu_count=len(parse_cpulist(cpus)) if cpus else 0)
        rendered = adapter.render_router(ctx) if is_router else adapter.render_worker(ctx)

        wrapper: list[str] = []
        if cpus or mode_argv:
            if node.has_tool("numactl"):
                wrapper = [executables["numactl"], *mode_argv, "--"]
                pin_method = "numactl"
            else:
                pin_method = "sched_setaffinity" if cpus else "none"
                # Local allocation is the kernel's default policy, so only an explicit
                # binding is lost without numactl.
                if mem_nodes and role.get("membind") != "local":
                    warnings.append(f"{role_name}: numactl is not installed on node {node.name}; "
                                    f"memory binding to NUMA node(s) {mem_nodes} is not applied")
                    mem_nodes = ""
        else:
            pin_method = "none"

        env: dict[str, str] = {}
        if not is_router:
            if adapter.uses_gpus:
                # PCI bus order makes CUDA's numbering match NVML's / nvidia-smi's indices.
                env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in role["gpus"])
            else:
                # A CPU engine must not grab a GPU even when its wheel was built with CUDA.
                env["CUDA_VISIBLE_DEVICES"] = ""
            env.update(norm["env"])
        env.update(rendered.env)
        env.update(role["env"])
        kernel_env, kernel_argv = kernel_refs_apply(norm.get("kernels") or [], role_name=role_name)
        env.update(kernel_env)
        redacted = dict(env)
        role_secrets = {} if is_router else dict(secret_env)
        for env_name, secret_name in role_secrets.items():
            redacted[env_name] = REDACTED
            if secret_values is not None:
                env[env_name] = secret_values[secret_name]

        health_url = http_url(role["host"], role["port"], rendered.health_path)
        generate_url = http_url(role["host"], role["port"], rendered.generate["path"]) if rendered.generate else ""
        readiness: list[dict] = [
            {"kind": "process_alive", "description": "the process (and its group) is running"},
            {"kind": "http", "method": "GET", "url": health_url, "expect": {"status": 200},
             "description": f"{rendered.health_path} answers 200"},
        ]
        for extra in rendered.extra_readiness:
            check = {k: v for k, v in extra.items() if k != "path"}
            check["url"] = http_url(role["host"], role["port"], extra["path"])
            readiness.append(check)
        if rendered.generate:
            readiness.append({
                "kind": "generate", "method": rendered.generate["method"], "url": generate_url,
                "json": rendered.generate["json"], "expect": {"status": 200},
                "description": "a one-token generation succeeds",
            })

        processes.append(ProcessSpec(
            role=role_name,
            ordinal=0,
            argv=wrapper + rendered.argv + kernel_argv,
            env=dict(sorted(env.items())),
            env_redacted=dict(sorted(redacted.items())),
            secret_env=role_secrets,
            wrapper=wrapper,
            cpus=cpus,
            mem_nodes=mem_nodes,
            numa_node=numa_node,
            pin_method=pin_method,
            gpu_ids=list(role["gpus"]),
            ports=dict(rendered.ports),
            host=role["host"],
            health_url=health_url,
            generate_url=generate_url,
            readiness=readiness,
            startup_timeout_s=norm["startup_timeout_s"],
            stop_grace_s=norm["stop_grace_s"],
        ))

    warnings += shared_cpu_warnings(processes)
    entry_role = norm["roles"]["router"] if topology == "pd" else norm["roles"]["single"]
    # Where clients connect from this host: a wildcard bind on another node is that node's address.
    entry_host, entry_problem = client_host(entry_role["host"], node_name=node.name, address=node.hostname)
    if entry_problem:
        warnings.append(entry_problem)
    elif node.name != settings.CEILING_NODE_NAME and _is_loopback(entry_role["host"]):
        # Used as given (the docs say so), but loopback there is not this host: said before a deploy.
        warnings.append(f"the entry URL http://{entry_host}:{entry_role['port']} is loopback on node "
                        f"{json_spelled(node.name)}: it answers only there, so clients on this host, a sweep "
                        f"included, cannot reach it; bind the {'router' if topology == 'pd' else 'single'} role's "
                        "host to 0.0.0.0 or to the node's own address")
    return LaunchPlan(
        engine=engine,
        topology=topology,
        node=node.name,
        served_model_name=norm["served_model_name"],
        entry_url=f"http://{entry_host}:{entry_role['port']}" if entry_host else "",
        entry_url_problem=entry_problem,
        node_address=node.hostname,
        processes=processes,
        restart=dict(norm["restart"]),
        startup_timeout_s=norm["startup_timeout_s"],
        stop_grace_s=norm["stop_grace_s"],
        warnings=warnings,
    )


def shared_cpu_warnings(processes: list[ProcessSpec]) -> list[str]:
    """One line per pair of processes of one plan pinned to overlapping CPUs (their ``cpus``: an
    explicit list, or all of a NUMA node's CPUs for a ``numa_node`` alone), in start order. Sharing
    is allowed (a small host may have no other choice), but the two compete for those CPUs: a
    prefill's tokenizer and scheduler stall a decode step's CPU work on the same core, which shows
    up as ITL spikes that the GPU does not explain. Unpinned processes share nothing here."""
    lines: list[str] = []
    pinned = [(p.role, set(parse_cpulist(p.cpus))) for p in processes if p.cpus]
    for i, (role_a, cpus_a) in enumerate(pinned):
        for role_b, cpus_b in pinned[i + 1:]:
            shared = sorted(cpus_a & cpus_b)
            if shared:
                many = len(shared) > 1
                lines.append(f"{role_a} and {role_b} are both pinned to CPU{'s' if many else ''} "
                             f"{format_cpulist(shared)}: they compete for {'them' if many else 'it'} (CPU work of "
                             "one delays the other's steps); give each role its own CPUs where the node has them")
    return lines


def _pinning_intent(role: dict, node: NodeFacts) -> tuple[str, str, int | None, list[str]]:
    """What a role asks for: ``(cpus, mem_nodes, numa_node, numactl options)``.

    An explicit CPU list wins over the NUMA node for CPU placement (``--physcpubind``);
    a NUMA node alone means all its CPUs (``--cpunodebind``). ``membind`` ``numa`` binds
    memory to the role's NUMA node (or the one holding all its CPUs), ``local`` allocates on
    the node of the running CPU (``--localalloc``), a list binds to those nodes.
    """
    numa = role.get("numa_node")
    opts: list[str] = []
    cpu_ids: list[int] = []
    if role.get("cpus"):
        cpu_ids = parse_cpulist(role["cpus"])
        opts.append(f"--physcpubind={role['cpus']}")
    elif numa is not None:
        facts = node.numa(numa)
        cpu_ids = list(facts.cpus) if facts else []
        opts.append(f"--cpunodebind={numa}")
    home = numa
    if home is None and cpu_ids:
        for n in node.numa_nodes:
            if set(cpu_ids) <= set(n.cpus):
                home = n.index
                break

    membind = role.get("membind", "none")
    mem_nodes = ""
    if membind == "numa" and home is not None:
        mem_nodes = str(home)
        opts.append(f"--membind={home}")
    elif membind == "local":
        holding = sorted({n.index for n in node.numa_nodes if set(cpu_ids) & set(n.cpus)})
        mem_nodes = format_cpulist(holding)
        opts.append("--localalloc")
    elif isinstance(membind, list) and membind:
        mem_nodes = format_cpulist(membind)
        opts.append(f"--membind={mem_nodes}")
    return format_cpulist(cpu_ids), mem_nodes, home, opts
