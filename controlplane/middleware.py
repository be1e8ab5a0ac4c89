"""Answers to partial requests (htmx's ``HX-Request: true``) that a page view refused.

Every page requires a signed-in user through Django's ``login_required`` (directly, or through
:func:`deployments.views.common.role_page`, which the deployments, benchmarks and kernels pages
all use), and ``login_required`` answers an anonymous request with a 302 to ``LOGIN_URL``. A
browser's XMLHttpRequest follows a redirect without telling the page, so a background refresh of
a page whose session ended (logged out in another tab, expired, deleted) used to receive the
login page with status 200, and htmx swapped it into the page.

:class:`PartialRequestMiddleware` applies one rule to the answer of every view, whichever app it
belongs to: a partial request of a signed-out user is answered **401** instead of the redirect
(:func:`signed_out_partial_response`), with the login URL whose ``next`` is the *page* the
request came from (htmx's ``HX-Current-URL`` header) in ``Ceiling-Login-URL``; a 403 (signed in,
but the role does not allow it) keeps its status and body. Both carry ``HX-Reswap: none``:
htmx swaps no 4xx answer by default (``htmx.config.responseHandling``), and the header keeps it
so should that configuration change. ``static/ceiling/ceiling.js`` shows the signed-out (or
no-access) state instead. A request without the header (a page load, a form post, the live
client's session probe) still gets the redirect; those redirects say ``Vary: HX-Request``.
"""
from __future__ import annotations

from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import resolve_url
from django.utils.cache import patch_vary_headers
from django.utils.deprecation import MiddlewareMixin
from django.utils.http import url_has_allowed_host_and_scheme

#: Response header with the login URL to offer on a 401 partial answer (``/login/?next=<page>``).
LOGIN_URL_HEADER = "Ceiling-Login-URL"
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


def is_partial(request: HttpRequest) -> bool:
    """Whether ``request`` is an htmx request (``HX-Request: true``): its answer is swapped into
    a part of a page rather than shown as a page."""
    return request.headers.get("HX-Request") == "true"


def page_path(request: HttpRequest) -> str | None:
    """Path and query of the page a partial request was made from (``HX-Current-URL``, the
    page's full URL), or None when the header is missing, is no URL of a path, or names
    another host or scheme."""
    url = request.headers.get("HX-Current-URL", "")
    if not url or not url_has_allowed_host_and_scheme(url, allowed_hosts={request.get_host()},
                                                      require_https=request.is_secure()):
        return None
    parts = urlsplit(url)
    if not parts.path.startswith("/"):
        return None
    return parts.path + (f"?{parts.query}" if parts.query else "")


def login_url_for(request: HttpRequest) -> str:
    """``LOGIN_URL`` with ``next`` set to the page of a partial request (no ``next`` when that
    page is not known), e.g. ``/login/?next=/deployments/3/``."""
    login = resolve_url(settings.LOGIN_URL)
    page = page_path(request)
    return f"{login}?{urlencode({'next': page})}" if page else login


def is_login_redirect(response: HttpResponse) -> bool:
    """Whether ``response`` sends the browser to the login page (``login_required``'s answer)."""
    if response.status_code not in REDIRECT_STATUSES or not response.has_header("Location"):
        return False
    return urlsplit(response["Location"]).path == urlsplit(resolve_url(settings.LOGIN_URL)).path


def signed_out_partial_response(request: HttpRequest) -> HttpResponse:
    """401 for a partial request of a signed-out user: a one-line text body, the login URL for
    the page in :data:`LOGIN_URL_HEADER`, ``HX-Reswap: none``, never cached."""
    login = login_url_for(request)
    response = HttpResponse(f"Signed out: log in again at {login}\n", status=401,
                            content_type="text/plain; charset=utf-8")
    response[LOGIN_URL_HEADER] = login
    response["HX-Reswap"] = "none"
    response["Cache-Control"] = "no-store"
    return response


class PartialRequestMiddleware(MiddlewareMixin):
    """Rewrites a page view's login redirect into :func:`signed_out_partial_response` for a
    partial request of a signed-out user, and marks a partial request's 403 ``HX-Reswap:
    none``. Sits after ``AuthenticationMiddleware`` (it reads ``request.user``)."""

    def process_response(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if is_login_redirect(response):
            patch_vary_headers(response, ("HX-Request",))
            user = getattr(request, "user", None)
            if is_partial(request) and not (user is not None and user.is_authenticated):
                response = signed_out_partial_response(request)
                patch_vary_headers(response, ("HX-Request",))
            return response
        if response.status_code == 403 and is_partial(request):
            response["HX-Reswap"] = "none"
            patch_vary_headers(response, ("HX-Request",))
        return response
