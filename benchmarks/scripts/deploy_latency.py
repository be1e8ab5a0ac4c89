#!/usr/bin/env python3
"""Deploy latency of the sim PD recipe against a real node agent.

Starts a scratch database (SQLite under a temporary directory, migrated), a real node agent
(``manage.py node_agent``, its own node name and queue, Redis at ``REDIS_URL``), stores a PD
``sim`` recipe (prefill, decode, the real sglang-router; free ports) and deploys and stops it
``--runs`` times (20 by default). For each run it reports, from the rows' timestamps:

* spawned: deploy request (``Deployment.created_at``) → the last process's ``started_at``;
* ready: deploy request → ``Deployment.ready_at``, minus the simulator's own startup delay
  (the profile's ``startup_delay_s`` × ``--time-scale``), i.e. what Ceiling adds;
* stop: stop request → stopped (wall clock), next to the recipe's grace period.

and prints median and p95 (nearest-rank) per column. Target: spawned
within 1 s median. Usage: ``.venv/bin/python benchmarks/scripts/deploy_latency.py [--runs N]``.
"""
from __future__ import annotations

import argparse
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROFILE = "demo-fast"


def _free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def p95(values: list[float]) -> float:
    """Nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _wait(predicate, timeout_s: float, what: str, every_s: float = 0.01):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    raise SystemExit(f"timed out after {timeout_s}s waiting for {what}")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns 0, or exits with a message when something does not come up."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--time-scale", type=float, default=0.05, help="sim time scale of both workers")
    parser.add_argument("--grace", type=int, default=5, help="recipe stop_grace_s (seconds)")
    args = parser.parse_args(argv)

    scratch = Path(tempfile.mkdtemp(prefix="ceiling-deploy-latency-"))
    node_name = f"bench-{uuid.uuid4().hex[:8]}"
    os.environ.update({
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "DATABASE_URL": f"sqlite:///{scratch / 'db.sqlite3'}",
        "CEILING_LOG_DIR": str(scratch / "logs"),
        "CEILING_NODE_NAME": node_name,
        "CEILING_AGENT_TICK_S": os.environ.get("CEILING_AGENT_TICK_S", "0.2"),
        "LOG_LEVEL": "WARNING",
    })
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from deployments import services
    from deployments.engines.simcore.profile import profile_load
    from deployments.models import Deployment, Node

    call_command("migrate", verbosity=0)
    agent_log = open(scratch / "agent.log", "wb")
    agent = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "node_agent", "--name", node_name],
                             cwd=ROOT, env=dict(os.environ), stdout=agent_log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    rows: list[tuple[float, float, float]] = []
    try:
        node = _wait(lambda: Node.objects.filter(name=node_name, agent_heartbeat_at__isnull=False).first(),
                     60, "the node agent to register", every_s=0.2)
        user = User.objects.create_user(username="bench")
        http_p, http_d, boot, router, prom = _free_ports(5)
        cpus = os.cpu_count() or 1
        recipe = services.recipe_create(user=user, name="bench-sim-pd", engine="sim", topology="pd", node=node, spec={
            "model": {"name": "sim/tiny"},
            "served_model_name": "tiny",
            "roles": {
                "prefill": {"cpus": "0", "host": "127.0.0.1", "port": http_p, "bootstrap_port": boot,
                            "flags": {"time-scale": args.time_scale}},
                "decode": {"cpus": "1" if cpus > 1 else "0", "host": "127.0.0.1", "port": http_d,
                           "flags": {"time-scale": args.time_scale}},
                "router": {"host": "127.0.0.1", "port": router, "flags": {"prometheus-port": prom}},
            },
            "sim": {"profile": PROFILE},
            "startup_timeout_s": 120,
            "stop_grace_s": args.grace,
        })
        sim_delay = profile_load(PROFILE).startup_delay_s * args.time_scale
        for run in range(args.runs):
            deployment = services.deployment_create(recipe=recipe, user=user)
            _wait(lambda: Deployment.objects.filter(pk=deployment.pk, status__in=["ready", "failed"]).exists(),
                  120, f"deployment {deployment.pk} to be ready")
            deployment.refresh_from_db()
            if deployment.status != "ready":
                raise SystemExit(f"run {run}: deployment failed: {deployment.reason}")
            started = [p.started_at for p in deployment.processes.all()]
            spawned_s = (max(started) - deployment.created_at).total_seconds()
            ready_s = (deployment.ready_at - deployment.created_at).total_seconds() - sim_delay
            t0 = time.monotonic()
            services.deployment_stop(deployment=deployment, user=user)
            _wait(lambda: Deployment.objects.filter(pk=deployment.pk, status__in=["stopped", "failed"]).exists(),
                  args.grace * 3 + 60, f"deployment {deployment.pk} to stop")
            stop_s = time.monotonic() - t0
            rows.append((spawned_s, ready_s, stop_s))
            print(f"run {run + 1:2d}: spawned {spawned_s:6.3f}s  ready {ready_s:6.3f}s  stop {stop_s:6.3f}s",
                  file=sys.stderr)
    finally:
        if agent.poll() is None:
            os.kill(agent.pid, signal.SIGTERM)
            try:
                agent.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(agent.pid, signal.SIGKILL)
        agent_log.close()

    spawned, ready, stop = ([r[i] for r in rows] for i in range(3))
    print(f"\nsim PD (prefill + decode + sglang-router), {len(rows)} deploys, agent tick "
          f"{os.environ['CEILING_AGENT_TICK_S']} s, sim startup delay {sim_delay:.3f} s excluded from ready\n")
    print("| measure | median | p95 | target |")
    print("|---|---|---|---|")
    print(f"| deploy request → all 3 processes spawned | {statistics.median(spawned):.3f} s | {p95(spawned):.3f} s "
          f"| ≤ 1 s median ({'met' if statistics.median(spawned) <= 1.0 else 'missed'}) |")
    print(f"| deploy request → ready (minus sim delay) | {statistics.median(ready):.3f} s | {p95(ready):.3f} s | – |")
    print(f"| stop request → stopped | {statistics.median(stop):.3f} s | {p95(stop):.3f} s "
          f"| grace period {args.grace} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
