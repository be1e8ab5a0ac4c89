"""The status line of a 429 as daphne writes it: ``HTTP/1.1 429 Too Many Requests`` with a
``Retry-After`` in seconds, for the sign-in limit of the login page and the token endpoint's.
A real daphne (``controlplane.asgi:application``) on a free port against the test database, read
with :mod:`http.client`, which reports the reason phrase the server sent."""
from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from controlplane import login_throttle
from controlplane.reason_phrases import reason_phrases_fill
from deployments.tests.test_agent_support import database_url, free_ports, wait_for

pytestmark = pytest.mark.slow

DAPHNE = Path(sys.executable).with_name("daphne")


def test_it_fills_the_phrases_twisted_lacks_and_keeps_its_own():
    from twisted.web import http as twisted_http

    reason_phrases_fill()
    assert twisted_http.RESPONSES[429] == b"Too Many Requests"
    assert twisted_http.RESPONSES[422] == b"Unprocessable Entity"
    assert twisted_http.RESPONSES[404] == b"Not Found"
    assert reason_phrases_fill() == []  # once is enough


@pytest.fixture
def daphne(transactional_db, tmp_path) -> Iterator[int]:
    """A daphne serving Ceiling on a free port of 127.0.0.1 (its own in-process cache); the port."""
    (port,) = free_ports(1)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "controlplane.settings", "DATABASE_URL": database_url(),
           "CEILING_VAR_DIR": str(tmp_path / "var"), "CEILING_LOG_DIR": str(tmp_path / "logs")}
    env.pop("CEILING_CACHE_URL", None)
    log = (tmp_path / "daphne.log").open("wb")
    proc = subprocess.Popen([str(DAPHNE), "-b", "127.0.0.1", "-p", str(port), "controlplane.asgi:application"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def answers() -> bool:
            assert proc.poll() is None, (tmp_path / "daphne.log").read_text()
            try:
                return _request(port, "GET", "/login/")[0].status == 200
            except OSError:
                return False

        wait_for(answers, timeout_s=60, what="daphne to answer", every_s=0.2)
        yield port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _request(port: int, method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[http.client.HTTPResponse, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response, response.read()
    finally:
        conn.close()


def test_the_sign_in_limit_answers_429_too_many_requests_with_retry_after(daphne):
    page, html = _request(daphne, "GET", "/login/")
    cookie = re.search(r"csrftoken=([^;]+)", page.getheader("Set-Cookie") or "").group(1)
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1).decode()
    headers = {"Cookie": f"csrftoken={cookie}", "Content-Type": "application/x-www-form-urlencoded"}
    form = urlencode({"csrfmiddlewaretoken": token, "username": "nobody", "password": "wrong"}).encode()
    for attempt in range(login_throttle.MAX_FAILURES):
        again, _ = _request(daphne, "POST", "/login/", form, headers)
        assert (again.status, again.reason) == (200, "OK"), attempt

    refused, text = _request(daphne, "POST", "/login/", form, headers)

    assert (refused.status, refused.reason) == (429, "Too Many Requests")
    assert 1 <= int(refused.getheader("Retry-After")) <= login_throttle.WINDOW_S
    assert text.decode().startswith("Too many failed sign-ins from this address (20 in the last 60 s): try again in ")


def test_the_token_limit_answers_429_too_many_requests_with_retry_after(daphne):
    body = b'{"username": "nobody", "password": "wrong"}'
    headers = {"Content-Type": "application/json"}
    answers = [_request(daphne, "POST", "/api/auth/token/", body, headers)[0] for _ in range(20)]
    assert {(a.status, a.reason) for a in answers} == {(400, "Bad Request")}

    refused, text = _request(daphne, "POST", "/api/auth/token/", body, headers)

    assert (refused.status, refused.reason) == (429, "Too Many Requests")
    assert 1 <= int(refused.getheader("Retry-After")) <= 60
    assert b"Request was throttled" in text
