"""The node sampler end to end in one process: a real ``sim`` engine and real process trees as
the deployment's processes, an NVML stand-in listing their pids on a GPU, the real host, real
Redis for the broadcasts (received through the real channel layer) and the test database for
the history."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import httpx
import pytest
from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers

from controlplane import realtime
from deployments.choices import DeploymentStatus, ProcessStatus
from deployments.models import Deployment, DeploymentTelemetry, Node, NodeTelemetry, NumaNode, Recipe, ServerProcess
from deployments.supervisor.procfs import proc_start_ticks
from deployments.telemetry.gpu import MIB
from deployments.telemetry.sampler import NodeSampler, metrics_url, sampler_thread_start
from deployments.tests.test_sim_server import procs, start_sim  # noqa: F401 - fixture
from deployments.tests.test_telemetry_gpu import FakeNvml, h200

NODE_KEYS = {"node", "t", "interval_s", "gpus", "host", "nvml"}
GPU_KEYS = {"index", "uuid", "name", "memory", "utilization_pct", "memory_utilization_pct", "power_w",
            "power_limit_w", "temperature_c", "sm_clock_mhz", "mig_mode", "unavailable", "processes"}
GPU_PROC_KEYS = {"pid", "used_bytes", "process_id", "deployment_id", "role", "owner"}
HOST_KEYS = {"cpu_pct", "cpu_pct_per_numa", "memory", "loadavg"}
DEPLOYMENT_KEYS = {"deployment_id", "t", "status", "tok_s", "processes"}
PROCESS_KEYS = {"id", "role", "status", "health", "pid", "cpu_pct", "cpu_pct_pinned_set", "rss_bytes",
                "gpu_memory_bytes", "engine"}
ENGINE_KEYS = {"running", "queued", "kv_usage", "prompt_tokens_total", "generation_tokens_total", "gen_tok_s",
               "prompt_tok_s", "requests_total", "req_s", "errors_5xx_total", "error_5xx_s", "workers_healthy",
               "workers_total", "metrics_error"}

pytestmark = [pytest.mark.timeout(120)]


@pytest.fixture(autouse=True)
def _no_rate_bound(settings):
    settings.CEILING_REALTIME_MIN_INTERVAL_S = 0.0


def node_create(*, cpus: str = "0-1") -> Node:
    node = Node.objects.create(name=f"tel-{uuid.uuid4().hex[:8]}", hostname="here", cpu_count=2)
    NumaNode.objects.create(node=node, index=0, cpus=cpus)
    return node


def deployment_create(node: Node, *, engine: str = "sim", status: str = DeploymentStatus.READY) -> Deployment:
    recipe = Recipe.objects.create(name=f"r-{uuid.uuid4().hex[:8]}", engine=engine, topology="single", node=node)
    return Deployment.objects.create(recipe=recipe, recipe_version=1, node=node, status=status)


def process_row(deployment: Deployment, *, role: str, pid: int | None, port: int | None = None,
                status: str = ProcessStatus.READY, cpus: str = "0", ordinal: int = 0) -> ServerProcess:
    return ServerProcess.objects.create(
        deployment=deployment, role=role, ordinal=ordinal, status=status, pid=pid,
        start_ticks=proc_start_ticks(pid) if pid else None, cpus=cpus, effective_cpus=cpus,
        ports={"http": port} if port else {}, health_url=f"http://127.0.0.1:{port}/health" if port else "",
    )


LAUNCHER = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(120)\n"
)


@pytest.fixture
def launcher():
    """A process with one child, like an engine whose GPU work runs in a subprocess."""
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    child = int(proc.stdout.readline())
    yield proc.pid, child
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


class Inbox:
    """A channel on the real channel layer, added to groups; :meth:`take` collects messages.

    It has a layer instance and an event loop of its own, used for every call: channels-redis
    keeps per-channel locks bound to the loop that first used them, so a receive that a timeout
    cancelled on one ``async_to_sync`` loop (here or in an earlier test sharing the default
    layer) would make the next receive on another loop fail."""

    def __init__(self, *groups: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
        self.channel = self.loop.run_until_complete(self.layer.new_channel())
        self.groups = groups
        for group in groups:
            self.loop.run_until_complete(self.layer.group_add(group, self.channel))

    def take(self, until, timeout_s: float = 5.0) -> list[dict]:
        """Messages received until one satisfies ``until`` (included) or ``timeout_s`` passes."""
        got: list[dict] = []

        async def run() -> None:
            deadline = time.monotonic() + timeout_s
            while (left := deadline - time.monotonic()) > 0:
                try:
                    event = await asyncio.wait_for(self.layer.receive(self.channel), left)
                except asyncio.TimeoutError:
                    return
                got.append(event["message"])
                if until(event["message"]):
                    return

        self.loop.run_until_complete(run())
        return got

    def close(self) -> None:
        try:
            for group in self.groups:
                self.loop.run_until_complete(self.layer.group_discard(group, self.channel))
            self.loop.run_until_complete(self.layer.close_pools())
        finally:
            self.loop.close()


def _generate(base: str, tokens: int) -> None:
    resp = httpx.post(f"{base}/generate", json={"text": "hello world", "sampling_params": {
        "max_new_tokens": tokens, "ignore_eos": True}}, timeout=30, trust_env=False)
    assert resp.status_code == 200, resp.text


def test_it_derives_the_metrics_url_from_the_health_url_or_the_port():
    assert metrics_url(health_url="http://10.0.0.5:31000/health", ports={"http": 1}) == "http://10.0.0.5:31000/metrics"
    assert metrics_url(health_url="", ports={"http": 30000}) == "http://127.0.0.1:30000/metrics"
    assert metrics_url(health_url="", ports={}) == ""


def test_it_scrapes_a_router_on_its_prometheus_port_only():
    # The router's /metrics is on its own port (recipe flag prometheus-port), never its HTTP port.
    assert metrics_url(health_url="http://10.0.0.5:8000/health", ports={"http": 8000, "metrics": 29000},
                       role="router") == "http://10.0.0.5:29000/metrics"
    assert metrics_url(health_url="", ports={"http": 8000, "metrics": 29000},
                       role="router") == "http://127.0.0.1:29000/metrics"
    assert metrics_url(health_url="http://10.0.0.5:8000/health", ports={"http": 8000}, role="router") == ""


@pytest.mark.slow
def test_it_samples_gpus_host_and_a_real_engine_and_broadcasts_the_contract_shapes(db, procs, tmp_path, launcher):  # noqa: F811
    base, sim = start_sim(procs, tmp_path, "single", delay=0.0)
    deadline = time.monotonic() + 30
    while httpx.get(f"{base}/health", timeout=2, trust_env=False).status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    node = node_create()
    deployment = deployment_create(node)
    single = process_row(deployment, role="single", pid=sim.popen.pid, port=int(base.rsplit(":", 1)[1]), cpus="0")
    stopped = process_row(deployment, role="router", pid=None, status=ProcessStatus.EXITED, ordinal=0)
    helper_pid, helper_child = launcher
    other = process_row(deployment, role="prefill", pid=helper_pid, cpus="1")
    # One GPU: the engine itself, a child of the other process, and a stranger (this test).
    nvml = FakeNvml([h200(0, used=3 * 1024 * MIB, util=57,
                          compute=[(sim.popen.pid, 2048 * MIB), (helper_child, 512 * MIB), (os.getpid(), 512 * MIB)])])
    inbox = Inbox(realtime.node_group(node.name), realtime.deployment_group(deployment.pk))
    sampler = NodeSampler(node_name=node.name, hz=2.0, nvml=nvml, nvidia_smi=None)
    try:
        _generate(base, 16)
        first_node, first = sampler.sample_once()
        time.sleep(0.6)
        _generate(base, 32)
        node_data, deployments = sampler.sample_once()
        messages = inbox.take(lambda m: m["type"] == "deployment.sample" and m["data"]["tok_s"], timeout_s=5)
    finally:
        inbox.close()
        sampler.close()

    assert set(node_data) == NODE_KEYS
    assert node_data["node"] == node.name and node_data["interval_s"] == 0.5 and node_data["nvml"] == "ok"
    (gpu,) = node_data["gpus"]
    assert GPU_KEYS <= set(gpu) and gpu["utilization_pct"] == 57 and gpu["memory"]["used_bytes"] == 3072 * MIB
    by_pid = {p["pid"]: p for p in gpu["processes"]}
    assert all(set(p) == GPU_PROC_KEYS for p in gpu["processes"])
    assert by_pid[sim.popen.pid] == {"pid": sim.popen.pid, "used_bytes": 2048 * MIB, "process_id": single.pk,
                                     "deployment_id": deployment.pk, "role": "single", "owner": "ceiling"}
    # Owned through an ancestor: the child of a process row's pid.
    assert by_pid[helper_child]["owner"] == "ceiling" and by_pid[helper_child]["process_id"] == other.pk
    assert by_pid[os.getpid()] == {"pid": os.getpid(), "used_bytes": 512 * MIB, "process_id": None,
                                   "deployment_id": None, "role": None, "owner": "other"}
    assert set(node_data["host"]) == HOST_KEYS and set(node_data["host"]["cpu_pct_per_numa"]) == {"0"}

    data = deployments[deployment.pk]
    assert set(data) == DEPLOYMENT_KEYS and data["status"] == "ready"
    procs_by_id = {p["id"]: p for p in data["processes"]}
    assert all(set(p) == PROCESS_KEYS and set(p["engine"]) == ENGINE_KEYS for p in data["processes"])
    engine_proc = procs_by_id[single.pk]
    assert engine_proc["pid"] == sim.popen.pid and engine_proc["health"] == "healthy"
    assert engine_proc["gpu_memory_bytes"] == 2048 * MIB
    assert engine_proc["rss_bytes"] > 1024 * 1024 and engine_proc["cpu_pct"] is not None
    assert engine_proc["cpu_pct_pinned_set"] is not None
    assert engine_proc["engine"]["generation_tokens_total"] == 48.0
    assert engine_proc["engine"]["gen_tok_s"] > 0
    # tok/s of the deployment: the single server's generation rate (routers and prefill excluded).
    assert data["tok_s"] == engine_proc["engine"]["gen_tok_s"]
    assert procs_by_id[other.pk]["gpu_memory_bytes"] == 512 * MIB
    assert procs_by_id[other.pk]["engine"]["metrics_error"] == "no HTTP port recorded for this process"
    gone = procs_by_id[stopped.pk]
    assert gone["status"] == "exited" and gone["health"] == "stopped"
    assert (gone["pid"], gone["cpu_pct"], gone["rss_bytes"], gone["gpu_memory_bytes"]) == (None, None, None, None)
    assert gone["engine"]["metrics_error"].startswith("router: no prometheus-port in the recipe")

    types = [m["type"] for m in messages]
    assert "node.sample" in types and "deployment.sample" in types
    last = messages[-1]
    assert last["group"] == f"deployment-{deployment.pk}" and last["data"]["tok_s"] == data["tok_s"]
    assert {m["seq"] for m in messages if m["type"] == "node.sample"}  # sequenced
    assert realtime.latest_messages(realtime.node_group(node.name))["node.sample"]["data"]["t"] == node_data["t"]

    # History: the closed seconds were buffered and written on close, in rollup rows.
    assert sum(NodeTelemetry.objects.filter(node=node).values_list("samples", flat=True)) == 2
    rows = list(DeploymentTelemetry.objects.filter(deployment=deployment).order_by("at"))
    assert sum(r.samples for r in rows) == 2 and rows[-1].data["status"] == "ready"
    if len(rows) == 2:  # the two samples fell in different seconds: the later one's tokens
        before = next(p for p in first[deployment.pk]["processes"] if p["id"] == single.pk)["engine"]
        counted = before["generation_tokens_total"]  # None: the first scrape landed after the sample
        assert rows[-1].data["tok_s"] == (48.0 - counted if counted is not None else data["tok_s"])
    assert rows[-1].data["processes"][str(single.pk)]["gpu_memory_bytes"] == 2048 * MIB


def test_it_says_null_not_zero_on_a_cpu_only_node_and_for_engines_without_metrics(db, launcher):
    node = node_create()
    deployment = deployment_create(node, engine="llamacpp")
    helper_pid, _ = launcher
    row = process_row(deployment, role="single", pid=helper_pid, port=1, cpus="")
    finished = deployment_create(node, status=DeploymentStatus.STOPPED)
    process_row(finished, role="single", pid=None, status=ProcessStatus.EXITED)
    sampler = NodeSampler(node_name=node.name, hz=2.0, nvml=None, nvidia_smi=None, publish=False, history=False)
    try:
        node_data, deployments = sampler.sample_once()
    finally:
        sampler.close()
    assert node_data["gpus"] == [] and node_data["nvml"] == "NVML not available"
    assert list(deployments) == [deployment.pk]  # a stopped deployment is not sampled
    (proc,) = deployments[deployment.pk]["processes"]
    assert proc["id"] == row.pk
    assert proc["gpu_memory_bytes"] is None  # no GPU reading at all: unknown, not 0
    assert proc["cpu_pct_pinned_set"] is None  # not pinned
    assert proc["engine"]["metrics_error"] == "llama-cpp-python's server exposes no /metrics"
    assert proc["engine"]["gen_tok_s"] is None and deployments[deployment.pk]["tok_s"] is None


def test_it_never_measures_a_pid_that_now_belongs_to_another_process(db, launcher):
    node = node_create()
    deployment = deployment_create(node)
    helper_pid, _ = launcher
    row = process_row(deployment, role="single", pid=helper_pid, port=1)
    ServerProcess.objects.filter(pk=row.pk).update(start_ticks=row.start_ticks - 1)  # recorded for an older process
    sampler = NodeSampler(node_name=node.name, hz=2.0, nvml=FakeNvml([h200(0, compute=[(helper_pid, 5 * MIB)])]),
                          nvidia_smi=None, publish=False, history=False)
    try:
        node_data, deployments = sampler.sample_once()
    finally:
        sampler.close()
    (proc,) = deployments[deployment.pk]["processes"]
    assert proc["pid"] is None and proc["rss_bytes"] is None and proc["gpu_memory_bytes"] is None
    assert node_data["gpus"][0]["processes"][0]["owner"] == "other"


def test_it_refuses_a_rate_outside_the_supported_range(db):
    node = node_create()
    with pytest.raises(ValueError, match="outside 0.1-20 Hz"):
        NodeSampler(node_name=node.name, hz=50.0, nvml=None, nvidia_smi=None)


@pytest.mark.slow
def test_it_runs_in_its_own_thread_at_the_configured_rate_and_stops_cleanly(transactional_db, settings):
    settings.CEILING_TELEMETRY_FLUSH_S = 0.5
    node = node_create()
    inbox = Inbox(realtime.node_group(node.name))
    stop = threading.Event()
    thread = sampler_thread_start(node_name=node.name, stop=stop, hz=10.0, nvml=FakeNvml([h200(0), h200(1)]),
                                  nvidia_smi=None)
    try:
        started = time.monotonic()
        messages = inbox.take(lambda m: False, timeout_s=2.0)
    finally:
        stop.set()
        thread.join(timeout=10)
        inbox.close()
    assert not thread.is_alive()
    samples = [m for m in messages if m["type"] == "node.sample"]
    # 10 Hz for about 2 s on a busy 2-core machine: at least 8 of the 20 samples arrive, in order,
    # typically 0.1 s apart and never in a burst (a late sample is not made up for).
    assert len(samples) >= 8, len(samples)
    seqs = [m["seq"] for m in samples]
    assert seqs == sorted(seqs) and len(samples[0]["data"]["gpus"]) == 2
    gaps = sorted(b["data"]["t"] - a["data"]["t"] for a, b in zip(samples, samples[1:]))
    assert gaps[len(gaps) // 2] == pytest.approx(0.1, abs=0.03), gaps
    assert gaps[0] >= 0.02, gaps
    assert time.monotonic() - started < 10
    rows = NodeTelemetry.objects.filter(node=node)
    assert rows.count() >= 2
    assert sum(r.samples for r in rows) >= len(samples) - 2


def test_it_sends_a_final_sample_with_the_stopped_state_when_a_deployment_ends(db, launcher):
    """A page open while a deployment is stopped must not keep the last "ready / healthy" sample:
    the agent sends one last sample with the state the database now holds, every reading null."""
    node = node_create()
    deployment = deployment_create(node, engine="llamacpp")
    helper_pid, _ = launcher
    row = process_row(deployment, role="single", pid=helper_pid, port=1, cpus="")
    inbox = Inbox(realtime.deployment_group(deployment.pk))
    sampler = NodeSampler(node_name=node.name, hz=2.0, nvml=None, nvidia_smi=None, history=False)
    try:
        _, first = sampler.sample_once()
        assert first[deployment.pk]["status"] == "ready"
        assert first[deployment.pk]["processes"][0]["health"] == "healthy"
        Deployment.objects.filter(pk=deployment.pk).update(status=DeploymentStatus.STOPPED)
        ServerProcess.objects.filter(pk=row.pk).update(status=ProcessStatus.EXITED, pid=None)
        sampler._rows_at = float("-inf")  # the next sample re-reads the rows
        _, after = sampler.sample_once()
        assert deployment.pk not in after  # sampling of the ended deployment stops ...
        got = inbox.take(lambda m: m["data"].get("final"))
    finally:
        sampler.close()
        inbox.close()
    final = got[-1]["data"]  # ... after one final sample saying so
    assert final["final"] is True and final["status"] == "stopped" and final["tok_s"] is None
    (proc,) = final["processes"]
    assert proc["id"] == row.pk and proc["status"] == "exited" and proc["health"] == "stopped"
    assert proc["pid"] is None and proc["engine"]["metrics_error"] == "process is exited"
