"""A management command whose stdout reader stops early (``manage.py dryrun x | head``) ends
quietly with exit status 141, no ``BrokenPipeError`` traceback; a broken pipe that is not stdout
still raises."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from deployments.services import recipe_create
from deployments.tests.factories import cpu_node_create
from deployments.tests.test_agent_support import database_url

ROOT = Path(__file__).resolve().parents[2]
SPEC = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
        "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 31234}}, "sim": {"profile": "demo-fast"}}


@pytest.fixture
def sim_recipe(transactional_db, operator):
    node = cpu_node_create(name="pipe-box")
    return recipe_create(user=operator, name="pipe-recipe", description="", engine="sim", topology="single",
                         node=node, spec=SPEC)


def _env() -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": database_url(), "DJANGO_SETTINGS_MODULE": "controlplane.settings"}


def test_a_reader_that_closes_before_reading_gets_a_quiet_141(sim_recipe):
    proc = subprocess.Popen([sys.executable, "manage.py", "dryrun", sim_recipe.name], cwd=ROOT, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()   # the reader is gone before the command writes anything
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 141, err.decode()
    assert err.decode() == ""


def test_piping_into_head_prints_the_first_line_and_no_traceback(sim_recipe):
    done = subprocess.run(["bash", "-c", f'"{sys.executable}" manage.py dryrun {sim_recipe.name} | head -1; '
                           'echo "status ${PIPESTATUS[0]}" >&2'],
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    assert len(done.stdout.splitlines()) == 1 and sim_recipe.name in done.stdout
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr
    assert done.stderr.strip() in ("status 0", "status 141")


def test_a_broken_pipe_elsewhere_is_not_hidden(monkeypatch):
    import django.core.management

    sys.path.insert(0, str(ROOT))
    try:
        import manage
    finally:
        sys.path.remove(str(ROOT))

    def broken(argv):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(django.core.management, "execute_from_command_line", broken)
    monkeypatch.setattr(sys, "argv", ["manage.py", "anything"])
    read_end, write_end = os.pipe()
    try:
        with open(write_end, "w") as stdout:
            monkeypatch.setattr(sys, "stdout", stdout)
            with pytest.raises(BrokenPipeError):
                manage.main()
    finally:
        os.close(read_end)
