"""Test support for sweep tests: a real ``sim`` server process and a ready deployment row that
points at it (no node agent runs: the tests own the process, and write the node's heartbeat as
an online agent would)."""
from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from django.utils import timezone

from deployments.choices import DeploymentStatus, ProcessStatus, Role
from deployments.models import Deployment, Node, Recipe, ServerProcess

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sim_start(log: Path, *, profile: str = "demo-fast", model: str = "sim-model",
              time_scale: float | None = None, extra: tuple[str, ...] = ()) -> tuple[str, subprocess.Popen]:
    """Start ``python -m deployments.engines.sim_server --role single`` on a free port; wait for
    /health. ``time_scale`` multiplies the profile's modelled times (``--time-scale``); ``extra``
    arguments follow the others."""
    port = free_port()
    scale = ["--time-scale", str(time_scale)] + list(extra) if time_scale is not None else list(extra)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "deployments.engines.sim_server", "--role", "single", "--host", "127.0.0.1",
             "--port", str(port), "--profile", profile, "--model-name", model, "--startup-delay-s", "0", *scale],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                return base, proc
        except httpx.HTTPError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)


def sim_deployment_create(*, base_url: str, status: str = DeploymentStatus.READY, model: str = "sim-model",
                          recipe_name: str = "sim-single", gpus_modelled: int | None = 4,
                          topology: str = "single") -> Deployment:
    """A deployment row of a sim single-server recipe whose process row points at ``base_url``, on
    node ``local`` with its agent online (a heartbeat now), as a ready deployment's node is."""
    node, _ = Node.objects.get_or_create(name="local", defaults={"hostname": "localhost", "cpu_count": 2})
    node.agent_heartbeat_at = timezone.now()
    node.save(update_fields=["agent_heartbeat_at"])
    sim: dict = {"profile": "demo-fast"}
    if gpus_modelled is not None:
        sim["gpus_modelled"] = gpus_modelled
    spec = {"served_model_name": model, "model": {"name": model}, "sim": sim, "startup_timeout_s": 5,
            "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": int(base_url.rsplit(":", 1)[1])}}}
    recipe = Recipe.objects.create(name=recipe_name, engine="sim", topology=topology, node=node, spec=spec)
    deployment = Deployment.objects.create(recipe=recipe, recipe_version=1, spec_snapshot=spec, node=node,
                                           status=status, entry_url=base_url if status == DeploymentStatus.READY else "")
    ServerProcess.objects.create(deployment=deployment, role=Role.SINGLE, status=ProcessStatus.READY,
                                 argv=["python", "-m", "deployments.engines.sim_server", "--role", "single"],
                                 env_redacted={"HF_TOKEN": "***"}, cpus="0", effective_cpus="0", pin_method="none",
                                 health_url=f"{base_url}/health", generate_url=f"{base_url}/generate")
    return deployment


@contextlib.contextmanager
def agent_watched_deployment(*, recipe: Recipe, user, tmp_path: Path, tick_s: float, what: str):
    """A deployment of ``recipe`` launched by the node side's own code and watched by the agent's
    monitor pass (:func:`deployments.agent.deployment_check`, every ``tick_s`` seconds in a thread,
    with the node's heartbeat, as the agent's tick would); yields it once ready (30 s at most), then stops the watch, tears
    the deployment down and kills every engine tree that logged under ``tmp_path``."""
    from deployments import services as deployment_services
    from deployments.agent import deployment_check, deployment_launch, deployment_teardown
    from deployments.tests.test_agent_support import kill_trees_logging_under, wait_for

    deployment = deployment_services.deployment_create(recipe=recipe, user=user)
    stop = threading.Event()

    def monitor() -> None:
        while not stop.is_set():
            Node.objects.filter(pk=recipe.node_id).update(agent_heartbeat_at=timezone.now())
            deployment_check(deployment_id=deployment.pk)
            stop.wait(tick_s)

    watcher = threading.Thread(target=monitor, name="agent-monitor", daemon=True)
    try:
        assert deployment_launch(deployment_id=deployment.pk) == "launched"
        watcher.start()
        wait_for(lambda: Deployment.objects.get(pk=deployment.pk).status == "ready", timeout_s=30,
                 what=f"{what} to be ready")
        yield Deployment.objects.get(pk=deployment.pk)
    finally:
        stop.set()
        watcher.join(15)
        deployment_teardown(deployment_id=deployment.pk)
        kill_trees_logging_under(tmp_path)


@contextlib.contextmanager
def sweep_executing(*, sweep_id: int, release: threading.Event) -> Iterator[tuple[dict, threading.Thread]]:
    """Run ``sweep_execute(sweep_id=...)`` on a thread; yields (a dict whose ``status`` is its
    result once it returns, the thread). ``release`` is set when the sweep ends and on leaving
    the block, which waits for the thread: a point the test holds on ``release`` never outlives it."""
    from benchmarks.services import sweep_execute

    result: dict = {}

    def execute() -> None:
        try:
            result["status"] = sweep_execute(sweep_id=sweep_id)
        finally:
            release.set()

    thread = threading.Thread(target=execute)
    thread.start()
    try:
        yield result, thread
    finally:
        release.set()
        thread.join()


def first_run_done_wait(sweep, done: int, *, timeout_s: float = 60.0) -> None:
    """Wait until ``sweep``'s first run reports at least ``done`` requests finished in its live
    progress (the point is running and that far in); AssertionError after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        run = sweep.runs.first()
        if run is not None and int((run.progress or {}).get("done") or 0) >= done:
            return
        assert time.monotonic() < deadline, f"the point never finished {done} requests"
        time.sleep(0.05)


def form_words(path: str, message: str) -> str:
    """The sweep form's words for the API's ``message`` at grid ``path``: an item of a list field
    (``grid.concurrency.1``) is named by its position as typed, 1-based (``item 2: ...``); any other
    path's message is the API's as it is."""
    parts = path.removeprefix("grid.").split(".")
    if len(parts) > 1 and parts[1].isdigit():
        return f"item {int(parts[1]) + 1}: {message}"
    return message
