"""The real stack for the browser tests: ``manage.py seed``, daphne (HTTP + websockets) on a
free port, a Celery worker for the control queue and the node agent of this host
(``manage.py node_agent --name local``), all subprocesses against the test database.

Isolation from anything else running on the machine (a ``make demo``, another test): the
processes use their own Redis database (``BROWSER_REDIS_DB``, emptied first), so the queues
``control`` and ``node.local`` and the live groups are theirs alone; logs, engine logs, sweep
records and the demo login live under the test's temporary directory; the example recipe's
ports are moved to free ones before it is deployed. :meth:`Stack.close` undeploys, stops every
process it started (SIGTERM to the process group, SIGKILL after a grace period) and kills any
engine tree still logging under the temporary directory.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

from deployments.tests.test_agent_support import database_url, free_ports, kill_trees_logging_under, wait_for

ROOT = Path(settings.BASE_DIR)
BIN = Path(sys.executable).parent
#: Redis database of the browser stack (0 is the default of every other process here).
BROWSER_REDIS_DB = int(os.environ.get("CEILING_BROWSER_REDIS_DB", "14"))
STOP_GRACE_S = 15.0


def browser_redis_url() -> str:
    """``settings.REDIS_URL`` with the database number replaced by :data:`BROWSER_REDIS_DB`."""
    parts = urlsplit(settings.REDIS_URL)
    return urlunsplit((parts.scheme, parts.netloc, f"/{BROWSER_REDIS_DB}", parts.query, parts.fragment))


@dataclass
class Stack:
    """Processes of one browser test; ``argv`` per name, so a stopped one can be started again."""

    tmp: Path
    port: int
    env: dict[str, str]
    argv: dict[str, list[str]] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_path(self, name: str) -> Path:
        return self.tmp / "logs" / f"{name}.log"

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self.log_path(name)
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"

    def start(self, name: str) -> subprocess.Popen:
        """Start process ``name`` detached in its own session, output appended to its log."""
        self.log_path(name).parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path(name), "ab") as out:
            proc = subprocess.Popen(self.argv[name], cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs[name] = proc
        return proc

    def stop(self, name: str) -> None:
        """SIGTERM the process group of ``name``, SIGKILL it after :data:`STOP_GRACE_S`."""
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass

    def wait_web(self, timeout_s: float = 60) -> None:
        def answers() -> bool:
            assert self.procs["web"].poll() is None, self.log_tail("web")
            try:
                with urllib.request.urlopen(f"{self.base_url}/login/", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_for(answers, timeout_s=timeout_s, what="daphne to answer", every_s=0.2)

    def wait_log(self, name: str, needle: str, timeout_s: float = 60) -> None:
        def seen() -> bool:
            assert self.procs[name].poll() is None, f"{name} exited:\n{self.log_tail(name)}"
            return needle in self.log_tail(name, 200_000)

        wait_for(seen, timeout_s=timeout_s, what=f"{name} to log {needle!r}", every_s=0.2)

    def manage(self, *args: str, timeout_s: float = 120) -> str:
        """Run ``manage.py <args>`` with the stack's environment; its output, or a failure."""
        done = subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=timeout_s)
        assert done.returncode == 0, f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def demo_login(self) -> tuple[str, str]:
        """The admin login ``manage.py seed`` generated (kept in the stack's ``var/``)."""
        data = json.loads((self.tmp / "var" / "demo-login.json").read_text())
        return data["username"], data["password"]

    def close(self) -> None:
        """Undeploy what runs on node ``local`` (while the agent lives), then stop everything."""
        try:
            if "agent" in self.procs and self.procs["agent"].poll() is None:
                self.manage("undeploy", "--node", "local", "--wait", "30", timeout_s=60)
        finally:
            for name in ("web", "worker", "agent"):
                self.stop(name)
            kill_trees_logging_under(self.tmp)


def stack_create(tmp: Path) -> Stack:
    """Seed the test database and start daphne, the control worker and the node agent (in
    parallel), then wait until each is ready."""
    import redis

    redis_url = browser_redis_url()
    redis.Redis.from_url(redis_url).flushdb()
    (port,) = free_ports(1)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_url,
        "CEILING_VAR_DIR": str(tmp / "var"),
        "CEILING_LOG_DIR": str(tmp / "engines"),
        "CEILING_NODE_NAME": "local",
        "CEILING_UI_URL": f"http://127.0.0.1:{port}/",
        "CEILING_AGENT_TICK_S": "0.2",
        "CEILING_AGENT_HEARTBEAT_S": "1",
        "PYTHONUNBUFFERED": "1",
    }
    stack = Stack(tmp=tmp, port=port, env=env)
    stack.argv = {
        "web": [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "controlplane.asgi:application"],
        "worker": [str(BIN / "celery"), "-A", "controlplane", "worker", "-l", "info", "-Q", "control",
                   "-n", f"browser-{port}@%h", "--pool", "solo"],
        "agent": [sys.executable, str(ROOT / "manage.py"), "node_agent", "--name", "local"],
    }
    stack.manage("seed")
    try:
        for name in ("web", "worker", "agent"):
            stack.start(name)
        stack.wait_web()
        stack.wait_log("worker", " ready.")
        stack.wait_log("agent", " ready.")
    except BaseException:
        stack.close()
        raise
    return stack


def free_local_ports(spec: dict) -> dict:
    """A copy of the ``local-sim-pd`` spec with every port moved to a free one (a demo on this
    machine may hold the example's ports)."""
    spec = json.loads(json.dumps(spec))
    http_p, boot, http_d, router, prom = free_ports(5)
    roles = spec["roles"]
    roles["prefill"].update(port=http_p, bootstrap_port=boot)
    roles["decode"]["port"] = http_d
    roles["router"]["port"] = router
    roles["router"].setdefault("flags", {})["prometheus-port"] = prom
    return spec

