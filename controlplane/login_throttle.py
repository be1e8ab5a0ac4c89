"""Failed sign-ins are limited per client address on the login pages (``/login/`` and
``/admin/login/``), as ``/api/auth/token/`` limits its attempts (:mod:`controlplane.token_views`).

A POST that does not sign in (the page answers the form again, not a redirect) counts as a
failure for the client's address for :data:`WINDOW_S` seconds; once an address has
:data:`MAX_FAILURES` failures in that window, every sign-in POST from it is answered 429 with a
``Retry-After`` header, the right password included, until the oldest failure leaves the
window. Successful sign-ins never count, so people who type their password right are never
slowed down. The address is the one DRF's throttles use (``REMOTE_ADDR``, or the
``X-Forwarded-For`` entry ``NUM_PROXIES`` from the right when Ceiling runs behind that many
proxies: ``CEILING_NUM_PROXIES``), so a client cannot pick its own by sending the header.

Failures are kept in Django's cache: per process by default (one web process, as the default
stack runs), in Redis with ``CEILING_CACHE_URL`` so several web processes share the count
(docker-compose sets it; :mod:`controlplane.settings`).
"""
from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable

from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from rest_framework.throttling import BaseThrottle

#: Failed sign-ins an address may make in :data:`WINDOW_S` seconds (the token endpoint allows 20
#: attempts a minute; a person who mistypes does not come near either).
MAX_FAILURES = 20
#: Seconds a failure counts.
WINDOW_S = 60.0


def client_address(request: HttpRequest) -> str:
    """The address a throttle keys on (DRF's ``BaseThrottle.get_ident`` rule)."""
    return BaseThrottle().get_ident(request)


def _key(address: str) -> str:
    return f"ceiling:login-failures:{address}"


def _recent(address: str, now: float) -> list[float]:
    return [t for t in cache.get(_key(address), []) if now - t < WINDOW_S]


def throttled_login(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Wrap a login view (Django's ``LoginView`` or the admin site's ``login``) with the limit
    described in the module docstring."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if request.method != "POST":
            return view(request, *args, **kwargs)
        address = client_address(request)
        now = time.time()
        failures = _recent(address, now)
        if len(failures) >= MAX_FAILURES:
            wait = max(1, math.ceil(WINDOW_S - (now - failures[0])))
            response = HttpResponse(
                f"Too many failed sign-ins from this address ({len(failures)} in the last {WINDOW_S:.0f} s): "
                f"try again in {wait} s.\n", status=429, content_type="text/plain; charset=utf-8")
            response["Retry-After"] = str(wait)
            return response
        response = view(request, *args, **kwargs)
        if response.status_code == 200:  # the form again: the credentials did not sign in
            failures.append(now)
            cache.set(_key(address), failures[-MAX_FAILURES:], timeout=math.ceil(WINDOW_S) + 1)
        return response

    return wrapper
