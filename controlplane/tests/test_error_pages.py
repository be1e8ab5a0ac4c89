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


def test_a_host_outside_allowed_hosts_is_a_json_400_under_api_and_a_plain_page_elsewhere(caplog):
    client = Client(HTTP_HOST="evil.example.com")
    with caplog.at_level("WARNING"):
        api = client.get("/api/recipes/")
        page = client.get("/recipes/")
    assert api.status_code == 400 and api["Content-Type"] == "application/json"
    assert api.json() == {"detail": "The Host header names a host this server does not answer to (set the "
                                    "ALLOWED_HOSTS environment variable to add one)."}
    assert page.status_code == 400 and page["Content-Type"].startswith("text/html")
    html = page.content.decode()
    assert "<h1>Bad request</h1>" in html and "ALLOWED_HOSTS" in html and "evil.example.com" not in html
    # one line a refusal in the log, no traceback: the console handler drops 4xx tracebacks
    assert settings.LOGGING["handlers"]["console"]["filters"][0] == "client_errors_one_line"
    records = [r for r in caplog.records if r.name == "django.security.DisallowedHost"]
    assert len(records) == 2
    from controlplane.logging import ClientErrorOneLineFilter

    handler_filter = ClientErrorOneLineFilter()
    for record in records:
        handler_filter.filter(record)
        assert record.exc_info is None and "DisallowedHost" in record.getMessage()
