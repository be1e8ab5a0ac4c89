"""Error pages never show Django's debug output by default: a 404 of a page names the path and
nothing of the URL map, whatever the route."""
from __future__ import annotations

import os
import subprocess
import sys

from django.conf import settings
from django.test import Client


def test_debug_is_off_unless_asked_for():
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "CEILING_ENV")}
    code = "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='controlplane.settings'; django.setup(); " \
           "from django.conf import settings; print(settings.DEBUG)"

    def debug(extra):
        out = subprocess.run([sys.executable, "-c", code], env={**env, **extra}, cwd=settings.BASE_DIR,
                             capture_output=True, text=True, timeout=60)
        return out.stdout.strip()
    assert debug({}) == "False"
    assert debug({"DEBUG": "1"}) == "True"


def test_a_404_is_the_plain_page(operator):
    client = Client()
    client.force_login(operator)
    for path in ("/no/such/page/", "/recipes/999999/"):
        response = client.get(path)
        assert response.status_code == 404, path
        html = response.content.decode()
        assert "<h1>Not found</h1>" in html and path in html
        assert "URLconf" not in html and "Using the URLconf" not in html
