"""Support for tests that run a real node agent (``manage.py node_agent``) as a subprocess
against the test database, with real engines (the ``sim`` server and the real sglang-router)
and real Redis.

Each test gets its own node name (so its own queue ``node.<name>``), free ports and a log
directory under ``tmp_path``; the fixture's finalizer SIGKILLs the agents it started and every
process tree whose shim logs under that directory, so a failing test leaves nothing behind.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection

from deployments import services
from deployments.models import Deployment, Node, Recipe, ServerProcess
from deployments.supervisor import process_find_by_tag
from deployments.supervisor.procfs import proc_scan

ROOT = Path(settings.BASE_DIR)
AGENT_START_TIMEOUT_S = 60.0


def test_it_hands_out_distinct_free_ports():
    ports = free_ports(4)
    assert len(set(ports)) == 4 and all(1024 <= p <= 65535 for p in ports)


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports that were free on 127.0.0.1 a moment ago."""
    socks, ports = [], []
    try:
        while len(ports) < count:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def wait_for(predicate: Callable[[], Any], *, timeout_s: float, what: str, every_s: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(every_s)


def database_url() -> str:
    """The URL of the database this test runs against (the test database), for subprocesses."""
    sd = connection.settings_dict
    if sd["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{Path(sd['NAME']).resolve()}"
    user = sd.get("USER") or "postgres"
    auth = f"{user}:{sd['PASSWORD']}" if sd.get("PASSWORD") else user
    return f"postgres://{auth}@{sd.get('HOST') or '127.0.0.1'}:{sd.get('PORT') or 5432}/{sd['NAME']}"


@dataclass
class AgentProc:
    """A ``manage.py node_agent`` subprocess of one test."""

    name: str
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen | None = None
    logs: list[Path] = field(default_factory=list)

    def start(self, **extra_env: str) -> "AgentProc":
        """Start the agent (with ``extra_env`` on top of the test's environment) and wait
        until it has registered the node and its worker is consuming."""
        env = {**self.env, **{k: str(v) for k, v in extra_env.items()}}
        log_path = self.log_path.with_name(f"{self.log_path.stem}-{len(self.logs)}.log")
        self.logs.append(log_path)
        with open(log_path, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(ROOT / "manage.py"), "node_agent", "--name", self.name],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        wait_for(lambda: self.proc.poll() is not None or b" ready." in log_path.read_bytes(),
                 timeout_s=AGENT_START_TIMEOUT_S, what=f"node agent {self.name} to start")
        assert self.proc.poll() is None, log_path.read_text()[-3000:]
        return self

    def log_text(self) -> str:
        """Everything the agent runs of this test wrote, oldest first."""
        return "\n".join(p.read_text(errors="replace") for p in self.logs if p.exists())

    def kill(self) -> None:
        """SIGKILL the agent process alone (engines live in their own sessions)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM and wait (a warm shutdown of the worker)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def kill_trees_logging_under(directory: Path) -> None:
    """SIGKILL every supervisor tree whose shim logs under ``directory`` (test cleanup)."""
    table = proc_scan()
    for pid in table:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if b"shim.py" not in cmdline or str(directory).encode() not in cmdline:
            continue
        tag = next((v.split(b"=", 1)[1].decode() for v in environ.split(b"\0") if v.startswith(b"CEILING_PROC_ID=")), "")
        victims = {pid} | {p for p, info in table.items() if info.pgid == pid}
        victims |= {h.pid for h in process_find_by_tag(tag)} if tag else set()
        for victim in victims:
            try:
                os.kill(victim, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


@pytest.fixture
def agent_env(tmp_path) -> dict[str, str]:
    """Environment for agents of this test: test database, own node name, logs in tmp."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    return {
        **os.environ,
        "DATABASE_URL": database_url(),
        "CEILING_NODE_NAME": name,
        "CEILING_LOG_DIR": str(tmp_path / "engines"),
        "CEILING_AGENT_TICK_S": "0.2",
        "CEILING_AGENT_HEARTBEAT_S": "1",
        "CEILING_LIVENESS_PERIOD_S": "1",
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
    }


@pytest.fixture
def agents(transactional_db, agent_env, tmp_path, settings):
    """Factory of node agents for this test: ``agents()`` starts one (on the test's node
    name), ``agents(**env)`` with extra environment. All are killed at teardown, and so is
    every engine tree logging under the test's directory."""
    settings.CEILING_LOG_DIR = tmp_path / "engines"
    started: list[AgentProc] = []
    holder: dict[str, AgentProc] = {}

    def start(**extra_env: str) -> AgentProc:
        agent = holder.get("agent")
        if agent is None:
            agent = AgentProc(name=agent_env["CEILING_NODE_NAME"], env=dict(agent_env), log_path=tmp_path / "agent.log")
            holder["agent"] = agent
            started.append(agent)
        return agent.start(**extra_env)

    yield start
    for agent in started:
        agent.kill()
    kill_trees_logging_under(tmp_path)


@pytest.fixture
def deployer(transactional_db) -> User:
    return User.objects.create_user(username="dana-deployer", password="correct-horse-battery")


def node_of(agent: AgentProc) -> Node:
    """The node row the agent registered (waits for its first heartbeat)."""
    return wait_for(lambda: Node.objects.filter(name=agent.name, agent_heartbeat_at__isnull=False).first(),
                    timeout_s=30, what="node registration")


def sim_single_recipe(*, node: Node, user: User, name: str = "sim-single", env: dict | None = None,
                      restart: dict | None = None, startup_timeout_s: int = 30, stop_grace_s: int = 5,
                      time_scale: float = 0.05) -> Recipe:
    """A single-server ``sim`` recipe pinned to CPU 0 on a free port (profile demo-fast, whose
    1 s startup delay is scaled by ``time_scale``)."""
    (port,) = free_ports(1)
    spec: dict[str, Any] = {
        "model": {"name": "sim/tiny"},
        "served_model_name": "tiny",
        "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": port, "flags": {"time-scale": time_scale}}},
        "sim": {"profile": "demo-fast"},
        "startup_timeout_s": startup_timeout_s,
        "stop_grace_s": stop_grace_s,
        "env": env or {},
    }
    if restart:
        spec["restart"] = restart
    return services.recipe_create(user=user, name=name, engine="sim", topology="single", node=node, spec=spec)


def renamed_pending_deployment(*, user: User, name: str, renamed_to: str, on_commit) -> Deployment:
    """A pending deployment of sim recipe ``name`` v1 (on a CPU node, with no agent to launch it),
    the recipe renamed ``renamed_to`` (v2) since; ``on_commit`` is pytest-django's
    ``django_capture_on_commit_callbacks``, which keeps the deploy's launch from running."""
    from deployments.tests.factories import cpu_node_create

    recipe = sim_single_recipe(node=cpu_node_create(), user=user, name=name)
    with on_commit(execute=False):  # no agent: it stays pending
        deployment = services.deployment_create(recipe=recipe, user=user)
    services.recipe_update(recipe=recipe, user=user, name=renamed_to)
    return Deployment.objects.select_related("recipe", "node").get(pk=deployment.pk)


def sim_pd_recipe(*, node: Node, user: User, name: str = "sim-pd", prefill_time_scale: float = 0.05,
                  decode_time_scale: float = 0.05, stop_grace_s: int = 5, startup_timeout_s: int = 60,
                  restart: dict | None = None) -> Recipe:
    """A PD ``sim`` recipe: prefill on CPU 0, decode on CPU 1 (or 0 on a one-CPU host), the real
    sglang-router in front; every port (including the router's Prometheus port, default 29000,
    which another router on the host may hold) is a free one."""
    http_p, http_d, boot, router, prom = free_ports(5)
    decode_cpu = "1" if (os.cpu_count() or 1) > 1 else "0"
    spec = {
        "model": {"name": "sim/tiny"},
        "served_model_name": "tiny",
        "roles": {
            "prefill": {"cpus": "0", "host": "127.0.0.1", "port": http_p, "bootstrap_port": boot,
                        "flags": {"time-scale": prefill_time_scale}},
            "decode": {"cpus": decode_cpu, "host": "127.0.0.1", "port": http_d,
                       "flags": {"time-scale": decode_time_scale}},
            "router": {"host": "127.0.0.1", "port": router, "flags": {"prometheus-port": prom}},
        },
        "sim": {"profile": "demo-fast"},
        "startup_timeout_s": startup_timeout_s,
        "stop_grace_s": stop_grace_s,
    }
    if restart is not None:
        spec["restart"] = restart
    return services.recipe_create(user=user, name=name, engine="sim", topology="pd", node=node, spec=spec)


def wait_status(deployment: Deployment, statuses: set[str] | str, *, timeout_s: float = 30) -> Deployment:
    """Wait until ``deployment`` reaches one of ``statuses``; returns it refreshed."""
    wanted = {statuses} if isinstance(statuses, str) else set(statuses)

    def reached():
        deployment.refresh_from_db()
        return deployment.status in wanted

    try:
        wait_for(reached, timeout_s=timeout_s, what=f"deployment {deployment.pk} to be {sorted(wanted)}")
    except AssertionError as exc:
        events = "\n".join(f"{e.at:%H:%M:%S.%f} {e.kind} {e.message}" for e in deployment.events.all())
        raise AssertionError(f"{exc}; status {deployment.status} {deployment.reason!r}\n{events}") from None
    return deployment


def engine_pids_of(deployment: Deployment) -> list[int]:
    """Pids of the engine processes (children of a shim) of every tag the deployment's rows
    carry, as seen in ``/proc`` now."""
    table = proc_scan()
    pids: set[int] = set()
    for row in ServerProcess.objects.filter(deployment=deployment):
        if not row.tag:
            continue
        shims = {h.pid for h in process_find_by_tag(row.tag) if h.pid == h.pgid}
        pids |= {p for p, info in table.items() if info.ppid in shims and info.running}
    return sorted(pids)


def engines_under(directory: Path) -> list[int]:
    """Pids of every engine (a shim's child) whose shim logs under ``directory``, whatever its
    row says: the ground truth for "no second engine"."""
    table = proc_scan()
    shims = set()
    for pid, info in table.items():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if info.running and b"shim.py" in cmdline and str(directory).encode() in cmdline:
            shims.add(pid)
    return sorted(p for p, info in table.items() if info.ppid in shims and info.running)
