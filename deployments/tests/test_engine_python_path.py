"""Launch plans name one interpreter path in every process: the checkout's own
``.venv/bin/python``, never resolved. A console script (daphne, celery) runs under the path in its
shebang, the venv's resolved home, so ``sys.executable`` there differs from the command line's;
the plans of the web server and of ``manage.py dryrun`` must not."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"

PROBE = """
import json, sys, django
django.setup()
from django.conf import settings
from deployments.examples import example_recipe, local_node_facts_example
from deployments.launch import launch_plan_render
ex = example_recipe("local-sim-single")
plan = launch_plan_render(engine=ex["engine"], topology=ex["topology"], spec=ex["spec"],
                          node=local_node_facts_example(cpu_count=4))
print(json.dumps({"sys": sys.executable, "engine": settings.CEILING_EXECUTABLES["python"],
                  "kernel": settings.CEILING_KERNEL_PYTHON, "argv0": plan.processes[-1].argv[0]}))
"""


def _probe(argv0: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("CEILING_ENGINE_PYTHON", "CEILING_KERNEL_PYTHON")}
    env["DJANGO_SETTINGS_MODULE"] = "controlplane.settings"
    out = subprocess.run([argv0, "-c", PROBE], executable=sys.executable, cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_engine_python_is_the_checkouts_venv_path_unresolved() -> None:
    assert VENV_PYTHON.exists()
    assert settings.CEILING_EXECUTABLES["python"] == str(VENV_PYTHON) or os.environ.get("CEILING_ENGINE_PYTHON")


def test_a_process_started_under_another_spelling_of_the_interpreter_plans_the_same_path() -> None:
    # the spelling a console script's shebang gives: the venv's home with its links resolved
    resolved = str(VENV_PYTHON.parent.resolve() / "python")
    plain, shebang = _probe(str(VENV_PYTHON)), _probe(resolved)
    assert shebang["sys"] == resolved  # the process itself knows the other spelling ...
    for probe in (plain, shebang):  # ... but every plan names the checkout's path
        assert probe["engine"] == probe["kernel"] == probe["argv0"] == str(VENV_PYTHON)
