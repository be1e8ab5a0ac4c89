"""Settings read from the environment, checked in a fresh interpreter (settings are read once)."""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def settings_of(**env) -> dict:
    code = ("import django, json; from django.conf import settings; django.setup(); "
            "print(json.dumps({'port': settings.CEILING_PORT, 'url': settings.CEILING_UI_URL}))")
    full = {k: v for k, v in os.environ.items() if k not in ("CEILING_PORT", "CEILING_UI_URL")}
    full.update(env, DJANGO_SETTINGS_MODULE="controlplane.settings")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=full, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_printed_url_follows_the_web_port():
    assert settings_of() == {"port": 8000, "url": "http://127.0.0.1:8000/"}
    assert settings_of(CEILING_PORT="8191") == {"port": 8191, "url": "http://127.0.0.1:8191/"}
    # an explicit URL (a proxy in front) wins over the port
    assert settings_of(CEILING_PORT="8191", CEILING_UI_URL="https://ceiling.example/") == {
        "port": 8191, "url": "https://ceiling.example/"}


def test_a_port_that_is_not_a_number_is_refused_with_its_name():
    code = "import django; django.setup()"
    env = dict(os.environ, CEILING_PORT="eighty", DJANGO_SETTINGS_MODULE="controlplane.settings")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    assert "CEILING_PORT='eighty' is not an integer" in proc.stderr


def test_the_classes_rest_framework_settings_name_import_in_any_order():
    """REST framework imports its settings' parser and pagination classes while
    ``rest_framework.views`` is being imported and in its system checks (which a Celery worker
    runs before any view module): the project's API modules must import first as well as last."""
    orders = [
        "import controlplane.api",
        "import rest_framework.checks as c; c.pagination_system_check(None); import rest_framework.views",
        "import controlplane.drf_defaults; import rest_framework.generics; import controlplane.api",
        "import deployments.api.views, benchmarks.api.views, kernels.api.views",
    ]
    for order in orders:
        code = f"import django; django.setup(); {order}; from django.core.management import call_command; " \
               "call_command('check')"
        env = dict(os.environ, DJANGO_SETTINGS_MODULE="controlplane.settings")
        proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, (order, proc.stderr[-2000:])
