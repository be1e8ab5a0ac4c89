"""``CEILING_CACHE_URL`` puts Django's cache, which holds the failed sign-in counts and the API
throttles, in Redis, so several web processes share one count: failures made through the login
page in this process are seen by a separately started process, and the address is
refused there too. A URL that is not Redis is refused at start-up with the reason."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis
from django.conf import settings as django_settings
from django.test import Client

from controlplane import login_throttle

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "correct-horse-battery"  # the personas' password (conftest)


def _django(env: dict[str, str], code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a new Python process after ``django.setup()`` with ``env``."""
    return subprocess.run([sys.executable, "-c", f"import django; django.setup(); {code}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.django_db
@pytest.mark.timeout(180)
def test_failed_sign_ins_counted_in_one_process_are_seen_by_another(settings, operator):
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    url = django_settings.REDIS_URL
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": url, "KEY_PREFIX": f"ceiling:{prefix}"}}
    client = Client(REMOTE_ADDR="10.7.7.7")
    try:
        for attempt in range(login_throttle.MAX_FAILURES):
            assert client.post("/login/", {"username": operator.username, "password": "wrong"}).status_code == 200, attempt
        assert client.post("/login/", {"username": operator.username, "password": PASSWORD}).status_code == 429
        # Another process configured only through the environment reads the same count.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
        env.update(CEILING_CACHE_URL=url, CEILING_REALTIME_PREFIX=prefix, DJANGO_SETTINGS_MODULE="controlplane.settings")
        other = _django(env, "from django.core.cache import cache; from django.conf import settings; "
                             "print('RESULT', settings.CACHES['default']['BACKEND'], "
                             "len(cache.get('ceiling:login-failures:10.7.7.7') or []))")
        assert other.returncode == 0, other.stderr
        [line] = [x for x in other.stdout.splitlines() if x.startswith("RESULT ")]
        _, backend, count = line.split()
        assert backend == "django.core.cache.backends.redis.RedisCache"
        assert int(count) == login_throttle.MAX_FAILURES
    finally:
        store = redis.Redis.from_url(url)
        for key in store.scan_iter(match=f"ceiling:{prefix}:*"):
            store.delete(key)


def test_a_cache_url_that_is_not_redis_is_refused_at_start_up():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(CEILING_CACHE_URL="memcached://127.0.0.1:11211", DJANGO_SETTINGS_MODULE="controlplane.settings")
    refused = _django(env, "print('started')")
    assert refused.returncode != 0
    assert "CEILING_CACHE_URL must be a redis://, rediss:// or unix:// URL, not 'memcached'" in refused.stderr
    assert "started" not in refused.stdout
