"""Shared test fixtures: named personas (admin, operator, viewer, outsider), API clients,
and nodes (a CPU-only local node and the 8-GPU seed node)."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient


def pytest_sessionfinish(session, exitstatus):
    """Remove the WAL side files of this run's SQLite test database. Django removes only the
    database file itself, and a connection still open then (a thread's, a child process's)
    leaves its ``-wal`` and ``-shm`` behind in ``var/`` for every run."""
    from pathlib import Path

    from django.conf import settings

    name = (settings.DATABASES["default"].get("TEST") or {}).get("NAME")
    if not settings.DATABASES["default"]["ENGINE"].endswith("sqlite3") or not name or Path(name).exists():
        return
    for suffix in ("-wal", "-shm", "-journal"):
        Path(f"{name}{suffix}").unlink(missing_ok=True)


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """Personas need real logins but not 1M PBKDF2 rounds each: hash with MD5 in tests only."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _unused_token_allowance():
    """Each test starts with the token endpoint's allowance (20 attempts a minute per address,
    ``TokenThrottle``) unused: the test client always comes from 127.0.0.1, so the attempts of
    the tests before it in the same process and minute would otherwise answer it 429. A test of
    the throttle itself makes its own 21 attempts."""
    from controlplane.token_views import TokenThrottle

    throttle = TokenThrottle()
    for address in ("127.0.0.1", "::1"):
        throttle.cache.delete(throttle.cache_format % {"scope": throttle.scope, "ident": address})


def _user(username: str, role: str | None) -> User:
    user = User.objects.create_user(username=username, password="correct-horse-battery")
    if role:
        group, _ = Group.objects.get_or_create(name=role)
        user.groups.add(group)
    return user


@pytest.fixture
def admin_user(db) -> User:
    return _user("alice-admin", "admin")


@pytest.fixture
def operator(db) -> User:
    return _user("oscar-operator", "operator")


@pytest.fixture
def viewer(db) -> User:
    return _user("vera-viewer", "viewer")


@pytest.fixture
def outsider(db) -> User:
    """Signed in, but in no role group: refused everywhere."""
    return _user("otto-outsider", None)


def _token_client(user: User) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def anon_api() -> APIClient:
    return APIClient()


@pytest.fixture
def admin_api(admin_user) -> APIClient:
    return _token_client(admin_user)


@pytest.fixture
def operator_api(operator) -> APIClient:
    return _token_client(operator)


@pytest.fixture
def viewer_api(viewer) -> APIClient:
    return _token_client(viewer)


@pytest.fixture
def outsider_api(outsider) -> APIClient:
    return _token_client(outsider)


def channel_layer_leftovers(layer) -> str:
    """What a Redis channel layer still holds for receives that no longer run: receivers counted
    (``receive_count``), backup cleaners not finished, per-channel cleanup locks still counted.
    Empty when there is none. A layer without these attributes (the in-memory one) holds none."""
    found = []
    count = getattr(layer, "receive_count", 0)
    if count:
        found.append(f"receive_count={count} (a receive() still pending, its event loop gone)")
    cleaners = getattr(layer, "receive_cleaners", None) or []
    if cleaners:
        found.append(f"{len(cleaners)} backup cleaner task(s) unfinished")
    waits = dict(getattr(getattr(layer, "receive_clean_locks", None), "wait_counts", None) or {})
    if waits:
        found.append(f"cleanup locks still counted {waits} (bound to the loop that took them)")
    return "; ".join(found)


@pytest.fixture(autouse=True)
def _channel_layer_left_clean():
    """After each test, the process's channel layers hold nothing for a receive of that test: a
    receive left pending, or a cleanup lock left counted, on an event loop that then ended makes
    a later test's receive on its own loop fail with ``RuntimeError: ... is bound to a different
    event loop`` (or "Two event loops are trying to receive()"). Such a leak fails the test that
    made it, and its layer is dropped so the tests after it start from a fresh one. Only layers
    already built are looked at; none is created here."""
    yield
    from channels.layers import channel_layers

    leaks = {}
    for alias, layer in list(channel_layers.backends.items()):
        found = channel_layer_leftovers(layer)
        if found:
            leaks[alias] = found
            channel_layers.backends.pop(alias, None)
    if leaks:
        pytest.fail("this test left channel-layer receive state behind its event loop: "
                    + "; ".join(f"{alias}: {found}" for alias, found in leaks.items())
                    + ". Disconnect every communicator and let its loop end normally "
                    "(cancel and await a receive task before the loop closes).", pytrace=False)
