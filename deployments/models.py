"""Rows of the deployments app: nodes and their topology, secrets, recipes (versioned),
deployments and their server processes.

Rows are the truth: every long-running thing has a status column driven by services; Celery
state is never consulted.
"""
from __future__ import annotations

from datetime import timezone as dt_timezone

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone
from simple_history.models import HistoricalRecords

from controlplane.jsonsafe import json_spelled
from controlplane.lengths import LengthLimit
from controlplane.secretbox import SealedTextField, secret_plaintext
from deployments.choices import DEPLOYMENT_ACTIVE, DeploymentStatus, Engine, ProcessStatus, Role, Topology

SLUG_RULE = "Use 1-63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit."

slug_validator = RegexValidator(r"^[a-z0-9][a-z0-9._-]{0,62}$", SLUG_RULE)


#: The most characters a name (of a recipe, node or secret) may have.
NAME_MAX_LENGTH = 63


#: The most characters a recipe version's change reason may have (simple-history's
#: ``history_change_reason`` column).
CHANGE_REASON_MAX_LENGTH = 100


def change_reason_validator(value: object) -> None:
    """A change reason over :data:`CHANGE_REASON_MAX_LENGTH` characters is refused in the wording of
    every other length limit: ``Use at most 100 characters; got 200.``"""
    LengthLimit(CHANGE_REASON_MAX_LENGTH)(value)

def digits_alone_problem(name: object, *, read_as: str, example_prefix: str) -> str | None:
    """Why ``name`` (a node's or a recipe's) cannot be digits alone, or None: where a name and an
    id share one argument, digits are read as the id (``read_as`` says where), so such a name could
    never be reached by it. ``must not be digits alone, got '1': <read_as>; add a letter, e.g.
    '<example_prefix>-1'``."""
    if not (isinstance(name, str) and name.isascii() and name.isdigit()):
        return None
    return (f"must not be digits alone, got {json_spelled(name)}: {read_as}; add a letter, "
            f"e.g. '{example_prefix}-{name}'")


def name_validator(value: object) -> None:
    """:data:`slug_validator` for input, one message per problem: a name over
    :data:`NAME_MAX_LENGTH` characters is refused for its length alone (``Use at most 63
    characters; got 80.``: the character rule is judged once the length is fine), any other for
    the character rule, quoting the name as every refusal quotes a value
    (:func:`controlplane.jsonsafe.json_spelled`), cut to 40 characters (``Use 1-63 …, starting
    with a letter or digit; got 'Bad Name!'.``; a text-direction control as ``<U+202E>``; a stored
    secret's value in any spelling a page masks it in as ``***redacted***``). Input fields use it instead of a
    ``max_length`` check of their own, so a long name gets one message. The model fields keep
    :data:`slug_validator` itself (its message is part of their migrations)."""
    LengthLimit(NAME_MAX_LENGTH)(value)
    try:
        slug_validator(value)
    except ValidationError:
        from controlplane.redaction import secret_values_mask

        # A stored secret's value typed into a name is shown masked, never echoed back.
        shown = secret_values_mask(value if isinstance(value, str) else str(value))
        text = json_spelled(shown, limit=NAME_MAX_LENGTH * 10)
        text = text if len(text) <= 40 else text[:39] + "…"
        raise ValidationError(f"{SLUG_RULE[:-1]}; got {text}.", code="invalid") from None


class Node(models.Model):
    """A GPU host (or a CPU-only host) with a node agent consuming the queue ``node.<name>``.

    ``topology`` keeps the raw discovery result (for audit); the normalised facts live in the
    related :class:`Gpu` and :class:`NumaNode` rows and in ``tools``.
    """

    name = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    hostname = models.CharField(max_length=255, blank=True)
    cpu_count = models.PositiveIntegerField(default=0)
    memory_total_bytes = models.BigIntegerField(default=0)
    tools = models.JSONField(default=dict, blank=True, help_text="e.g. {'numactl': '/usr/bin/numactl', 'nvcc': null}")
    driver_version = models.CharField(max_length=64, blank=True)
    cuda_version = models.CharField(max_length=32, blank=True)
    topology = models.JSONField(default=dict, blank=True)
    discovered_at = models.DateTimeField(null=True, blank=True)
    agent_heartbeat_at = models.DateTimeField(null=True, blank=True)
    agent_pid = models.IntegerField(null=True, blank=True)
    agent_stopped_at = models.DateTimeField(
        null=True, blank=True, help_text="when the agent shut down cleanly (offline at once, not after the timeout); cleared by its next heartbeat")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def queue_name(self) -> str:
        """Celery queue of this node's agent."""
        return f"node.{self.name}"

    @property
    def agent_online(self) -> bool:
        """True when the agent heartbeated within ``CEILING_HEARTBEAT_TIMEOUT_S`` seconds and has
        not shut down cleanly since (``agent_stopped_at`` at or after its last heartbeat)."""
        if self.agent_heartbeat_at is None or self.agent_stopped_cleanly:
            return False
        age = (timezone.now() - self.agent_heartbeat_at).total_seconds()
        return age <= settings.CEILING_HEARTBEAT_TIMEOUT_S

    @property
    def agent_stopped_cleanly(self) -> bool:
        """True when the agent's clean shutdown (``agent_stopped_at``) came after its last heartbeat."""
        return (self.agent_stopped_at is not None and self.agent_heartbeat_at is not None
                and self.agent_stopped_at >= self.agent_heartbeat_at)

    def has_tool(self, name: str) -> bool:
        return bool((self.tools or {}).get(name))

    @property
    def local_port_range(self) -> list[int] | None:
        """The node's ``net.ipv4.ip_local_port_range`` as ``[low, high]`` from its last
        discovery, None when it did not report one (a captured host, an older agent)."""
        from deployments.topology import port_settings_from_dict

        found = port_settings_from_dict(self.topology if isinstance(self.topology, dict) else {})
        return list(found["local_port_range"]) if "local_port_range" in found else None

    @property
    def reserved_ports(self) -> list[list[int]]:
        """The node's ``net.ipv4.ip_local_reserved_ports`` as inclusive ``[low, high]`` ranges."""
        from deployments.topology import port_settings_from_dict

        found = port_settings_from_dict(self.topology if isinstance(self.topology, dict) else {})
        return [list(r) for r in found.get("reserved_ports", ())]


class NumaNode(models.Model):
    """One NUMA node of a host: its index, CPU list (kernel list syntax, e.g. ``0-31,64-95``)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="numa_nodes")
    index = models.PositiveIntegerField()
    cpus = models.CharField(max_length=1024, help_text="kernel cpulist syntax, e.g. 0-31")
    memory_total_bytes = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["node", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="uniq_numa_per_node")]
        verbose_name = "NUMA node"
        verbose_name_plural = "NUMA nodes"

    def __str__(self) -> str:
        return f"{self.node.name}/numa{self.index}"


class Gpu(models.Model):
    """One GPU of a host as NVML enumerates it (``index`` is NVML's / nvidia-smi's index)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveIntegerField()
    uuid = models.CharField(max_length=64, blank=True)
    name = models.CharField(max_length=128, blank=True)
    memory_total_bytes = models.BigIntegerField(null=True, blank=True)
    pci_bus_id = models.CharField(max_length=32, blank=True)
    numa_node = models.IntegerField(null=True, blank=True, help_text="NUMA affinity; null when unknown")
    compute_capability = models.CharField(max_length=8, blank=True, help_text="e.g. 9.0")
    cpu_affinity = models.CharField(max_length=1024, blank=True, help_text="cpulist from nvidia-smi topo -m")

    class Meta:
        ordering = ["node", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="uniq_gpu_per_node")]
        verbose_name = "GPU"
        verbose_name_plural = "GPUs"

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"


class Secret(models.Model):
    """A named secret (e.g. a Hugging Face token). Its value is write-only: no page, API
    response, log line or rendered argv ever shows it; recipes reference it by name.

    ``value`` is encrypted at rest (:class:`controlplane.secretbox.SealedTextField`): assign the
    plaintext, read it back only through :meth:`plaintext`."""

    name = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    value = SealedTextField()
    description = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def plaintext(self) -> str:
        """The value in plain text (:func:`controlplane.secretbox.secret_plaintext`).

        Raises:
            controlplane.secretbox.SecretUnreadable: the stored value cannot be decrypted with
                the configured key (the message names this secret and the key source).
        """
        return secret_plaintext(self.value, name=self.name)


class RetiredSecretValue(models.Model):
    """An earlier value of a :class:`Secret` that was changed or deleted. Kept only so that
    redaction (:mod:`controlplane.redaction`) masks it in every process, also one started after
    the change, wherever it still appears (engine logs written while it was in use). Write-only
    like the secret itself: not in admin, the API or any page. Rows are written by the signal
    handlers in :mod:`deployments.signals`. ``value`` is encrypted at rest like
    :attr:`Secret.value`."""

    name = models.CharField(max_length=63)
    value = SealedTextField()
    retired_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-retired_at"]
        verbose_name = "retired secret value"

    def __str__(self) -> str:
        return f"{self.name} (retired {self.retired_at:%Y-%m-%d %H:%M})"

    def plaintext(self) -> str:
        """The earlier value in plain text (:func:`controlplane.secretbox.secret_plaintext`).

        Raises:
            controlplane.secretbox.SecretUnreadable: it cannot be decrypted with the configured key.
        """
        return secret_plaintext(self.value, name=self.name)


def recipe_name_shown(name: str) -> str:
    """A recipe's ``name`` as it is shown: a stored secret's value in it, in any spelling a page
    masks it in, replaced by ``***redacted***``
    (:func:`controlplane.redaction.secret_values_mask`), and a well-known credential shortened
    (``hf_…(37 chars)``). Names holding one are refused on every
    write; a row saved before that still holds it, and every read shows it so."""
    from controlplane.redaction import credential_mask, secret_values_mask

    return secret_values_mask(credential_mask(name)) if isinstance(name, str) and name else name


class Recipe(models.Model):
    """A deployment recipe: engine, topology, target node and a typed ``spec`` (see
    :mod:`deployments.recipes` for its schema). Every save is a new version in history;
    ``version`` counts them from 1."""

    name = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    description = models.TextField(blank=True)
    engine = models.CharField(max_length=16, choices=Engine.choices)
    topology = models.CharField(max_length=16, choices=Topology.choices)
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="recipes")
    spec = models.JSONField(default=dict)
    version = models.PositiveIntegerField(default=1)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    history = HistoricalRecords(excluded_fields=["updated_at"])

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name_shown

    @property
    def name_shown(self) -> str:
        """The name as pages, the API, the admin and messages show it: a stored secret's value in
        it (a name saved before such a value was refused there) masked
        (:func:`recipe_name_shown`)."""
        return recipe_name_shown(self.name)


class Deployment(models.Model):
    """One deployment of a recipe version on its node.

    States: pending → starting → ready → stopping → stopped, or failed (``reason`` says why).
    A ready deployment whose process crashed and is being restarted goes back to starting.
    ``stop_requested`` is set first by a stop or a cancel so workers can see it before acting
    (the node agent then spawns no more, never marks it ready, and stops it);
    ``cancel_requested`` only by a cancel (:func:`deployments.services.deployment_cancel`).
    ``entry_url`` is where clients send requests (the router for PD, else the single server).
    At most one deployment per (recipe, node) is active (pending, starting, ready or stopping);
    the partial unique index ``uniq_active_deployment_per_recipe_node`` enforces it, so two
    concurrent deploy requests cannot both insert.
    ``recipe_name`` is the recipe's name at ``recipe_version``, kept because a later rename
    changes ``recipe.name`` but not what ran (rows made before it was kept were filled from the
    recipe's history at that version by migration 0010).
    """

    recipe = models.ForeignKey(Recipe, on_delete=models.PROTECT, related_name="deployments")
    recipe_version = models.PositiveIntegerField()
    recipe_name = models.CharField(max_length=63, blank=True, help_text="the recipe's name at the deployed version")
    spec_snapshot = models.JSONField(default=dict, help_text="the recipe spec at deploy time")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="deployments")
    status = models.CharField(max_length=16, choices=DeploymentStatus.choices, default=DeploymentStatus.PENDING)
    reason = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False, help_text="a cancel was asked for (never set by a stop)")
    stop_requested = models.BooleanField(default=False, help_text="a stop or a cancel was asked for")
    entry_url = models.CharField(max_length=255, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    engine_limits = models.JSONField(
        null=True, blank=True,
        help_text="what the engine servers reported about their capacity when it became ready "
                  "(deployments.engine_limits); null until then")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status"])]
        constraints = [
            models.UniqueConstraint(
                fields=["recipe", "node"],
                condition=models.Q(status__in=sorted(DEPLOYMENT_ACTIVE)),
                name="uniq_active_deployment_per_recipe_node",
            )
        ]

    def __str__(self) -> str:
        return f"{self.deployed_recipe_name}#{self.pk}"

    @property
    def deployed_recipe_name_stored(self) -> str:
        """The recipe's name at the deployed version as stored; its current name only where
        that was never recorded (a row written without going through a deploy). What an engine
        is given (a served model name); people are shown :attr:`deployed_recipe_name`."""
        return self.recipe_name or self.recipe.name

    @property
    def deployed_recipe_name(self) -> str:
        """:attr:`deployed_recipe_name_stored` as pages, the API, messages and sweep names show
        it: a stored secret's value in it (a name saved before such a value was refused there)
        masked (:func:`recipe_name_shown`)."""
        return recipe_name_shown(self.deployed_recipe_name_stored)

    @property
    def recipe_renamed_to(self) -> str:
        """The recipe's current name (shown as :attr:`Recipe.name_shown`) where it was renamed
        since this version was deployed, else ``""``: what pages and messages add as "(now ...)"
        after :attr:`deployed_recipe_name`."""
        current = self.recipe.name
        return recipe_name_shown(current) if self.recipe_name and current != self.recipe_name else ""

    def deployed_recipe_label(self, *, version: bool = False) -> str:
        """How a deployment's recipe is named for people: the deployed name, ``vN`` with
        ``version``, then the current name where it differs: ``probe-sim-b v3 (now probe-renamed)``."""
        text = f"{self.deployed_recipe_name} v{self.recipe_version}" if version else self.deployed_recipe_name
        renamed = self.recipe_renamed_to
        return f"{text} (now {renamed})" if renamed else text


class ServerProcess(models.Model):
    """One engine process (prefill, decode, router or single server) of a deployment.

    Identity is (``pid``, ``start_ticks``: field 22 of ``/proc/<pid>/stat``), never a bare pid.
    States: pending → spawned → ready → exited | killed | failed. A crashed process that the
    restart policy restarts goes back to pending with ``next_restart_at`` set and
    ``restart_count`` incremented; ``failure_times`` (epoch seconds) feeds the policy's window.

    ``tag`` is written *before* the spawn and is inherited by every process of the tree as
    ``CEILING_PROC_ID``, so an engine spawned by an agent that died before recording its pid is
    found and adopted instead of being started twice. ``readiness`` holds the ordered checks of
    the launch plan (see :class:`deployments.launch.ProcessSpec`); ``probe_detail`` the outcome of
    the last readiness or liveness probe, ``probe_failures`` consecutive liveness failures and
    ``health_answered_at`` when the health URL last answered as expected (at ready, then at every
    liveness probe that passed): a busy process whose health URL times out is tolerated for
    ``CEILING_LIVENESS_BUSY_GRACE_S`` seconds from then (see :mod:`deployments.agent`).
    """

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="processes")
    role = models.CharField(max_length=16, choices=Role.choices)
    ordinal = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=16, choices=ProcessStatus.choices, default=ProcessStatus.PENDING)
    reason = models.TextField(blank=True)
    pid = models.IntegerField(null=True, blank=True)
    pgid = models.IntegerField(null=True, blank=True)
    start_ticks = models.BigIntegerField(null=True, blank=True, help_text="/proc/<pid>/stat field 22")
    argv = models.JSONField(default=list)
    env_redacted = models.JSONField(default=dict)
    cpus = models.CharField(max_length=1024, blank=True, help_text="intended CPU list")
    numa_node = models.IntegerField(null=True, blank=True)
    mem_nodes = models.CharField(max_length=64, blank=True)
    gpu_ids = models.JSONField(default=list)
    ports = models.JSONField(default=dict)
    pin_method = models.CharField(max_length=32, blank=True)
    effective_cpus = models.CharField(max_length=1024, blank=True)
    effective_mems = models.CharField(max_length=64, blank=True)
    pinning_verified = models.BooleanField(null=True)
    health_url = models.CharField(max_length=255, blank=True)
    generate_url = models.CharField(max_length=255, blank=True)
    readiness = models.JSONField(default=list, blank=True)
    startup_timeout_s = models.PositiveIntegerField(default=1800, help_text="seconds from spawn to ready")
    stop_grace_s = models.PositiveIntegerField(default=30, help_text="seconds between SIGTERM and SIGKILL")
    tag = models.CharField(max_length=128, blank=True, db_index=True, help_text="CEILING_PROC_ID of the tree")
    gpu_verified = models.BooleanField(null=True, help_text="NVML check; null when not checked")
    last_probe_at = models.DateTimeField(null=True, blank=True)
    probe_detail = models.TextField(blank=True)
    probe_failures = models.PositiveIntegerField(default=0)
    health_answered_at = models.DateTimeField(null=True, blank=True,
                                              help_text="when the health URL last answered as expected")
    failure_times = models.JSONField(default=list, blank=True, help_text="epoch seconds of failures")
    next_restart_at = models.DateTimeField(null=True, blank=True)
    log_path = models.CharField(max_length=1024, blank=True)
    restart_count = models.PositiveIntegerField(default=0)
    exit_code = models.IntegerField(null=True, blank=True)
    end_reason = models.CharField(max_length=255, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["deployment", "role", "ordinal"]
        constraints = [
            models.UniqueConstraint(fields=["deployment", "role", "ordinal"], name="uniq_process_per_role"),
        ]
        verbose_name = "server process"
        verbose_name_plural = "server processes"

    def __str__(self) -> str:
        return f"{self.deployment_id}/{self.role}{self.ordinal}"


class ProcessEvent(models.Model):
    """A timestamped transition on a deployment's timeline (process or deployment level)."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="events")
    process = models.ForeignKey(ServerProcess, null=True, blank=True, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now)
    kind = models.CharField(max_length=32)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        """``deployment 7 decode0 started at 2026-12-07 07:33:25 UTC`` (the process where the event
        is one of a process's), as the admin lists the events a delete would remove; never the
        message, which may name a recipe as it was then."""
        who = f" {self.process.role}{self.process.ordinal}" if self.process_id else ""
        return f"deployment {self.deployment_id}{who} {self.kind} at {self.at.astimezone(dt_timezone.utc):%Y-%m-%d %H:%M:%S} UTC"


class NodeTelemetry(models.Model):
    """One second of a node's telemetry: the ``node.sample`` messages of that second rolled up.

    ``at`` is the start of the second (UTC, whole seconds); ``samples`` how many samples went
    into it. ``data`` (see :mod:`deployments.telemetry.history` for the rules) holds
    ``{"gpus": {"<index>": {"memory_used_bytes", "memory_total_bytes", "utilization_pct",
    "memory_utilization_pct", "power_w", "temperature_c", "sm_clock_mhz"}}, "host_cpu_pct",
    "host_memory_used_bytes", "cpu_pct_per_numa": {"<numa>": pct}}``: rates and utilisations
    are the mean over the second, memory the last value; null where no sample of the second had
    a value. Rows older than ``CEILING_TELEMETRY_RETENTION_DAYS`` are pruned hourly.
    """

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="telemetry")
    at = models.DateTimeField()
    samples = models.PositiveSmallIntegerField(default=1)
    data = models.JSONField(default=dict)

    class Meta:
        ordering = ["node", "at"]
        constraints = [models.UniqueConstraint(fields=["node", "at"], name="uniq_node_telemetry_second")]
        indexes = [models.Index(fields=["at"], name="node_telemetry_at")]

    def __str__(self) -> str:
        return f"{self.node_id}@{self.at:%Y-%m-%d %H:%M:%S}"


class DeploymentTelemetry(models.Model):
    """One second of a deployment's telemetry (its ``deployment.sample`` messages rolled up).

    ``data``: ``{"status", "tok_s", "processes": {"<process id>": {"role", "pid", "gen_tok_s",
    "prompt_tok_s", "generation_tokens_total", "prompt_tokens_total", "running", "queued",
    "kv_usage", "gpu_memory_bytes", "cpu_pct", "rss_bytes", "health"}}}``; tok/s are the tokens
    the engines' counters gained in the second (so they add up to the counters; the mean of the
    sampled rates only where no earlier reading of the process exists, see
    :mod:`deployments.telemetry.history`), request counts, KV usage and CPU means over the second,
    counters, memory and states the last value. Kept with the deployment after it ends, so a past
    deployment or sweep can show its telemetry next to its results, until pruned by age.
    """

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="telemetry")
    at = models.DateTimeField()
    samples = models.PositiveSmallIntegerField(default=1)
    data = models.JSONField(default=dict)

    class Meta:
        ordering = ["deployment", "at"]
        constraints = [models.UniqueConstraint(fields=["deployment", "at"], name="uniq_deployment_telemetry_second")]
        indexes = [models.Index(fields=["at"], name="deployment_telemetry_at")]

    def __str__(self) -> str:
        return f"{self.deployment_id}@{self.at:%Y-%m-%d %H:%M:%S}"
