"""A request body sent with ``Transfer-Encoding`` (``chunked``) is refused with 411, never ignored.

Django reads a request body only as far as its ``Content-Length``: REST framework's
``Request._load_stream`` takes a missing ``CONTENT_LENGTH`` for an empty body, and Django's
``DATA_UPLOAD_MAX_MEMORY_SIZE`` is checked against that header alone. A body sent chunked (``curl -H
'Transfer-Encoding: chunked'``, a client streaming a generator) has no ``Content-Length``, so a
``PATCH /api/recipes/N/`` answered 200 having changed nothing and a ``POST /api/deployments/``
was told the recipe was missing. Under daphne the chunks are decoded by Twisted and reach Django
whole, with the header as it was sent (``META["HTTP_TRANSFER_ENCODING"]``, Twisted keeps it);
under a WSGI server (Django's ``runserver`` without daphne, its test server) the header reaches
Django the same way and the body is never read at all.

:class:`LengthRequiredMiddleware` answers every such request before any view, middleware or
parser reads its body: **411 Length Required**, whatever the method or path. Under ``/api/`` (and
``/api`` itself) the answer is JSON like every other API error, ``{"detail": "...", "code":
"length_required"}``; elsewhere a plain page (``411.html``, rendered without the request, as the
400 page is) with the same words. A ``Transfer-Encoding: identity`` alone is no transfer coding
and is let through. Django logs the one warning line (``Length Required: /api/recipes/3/``).
"""
from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template import loader
from django.utils.deprecation import MiddlewareMixin

#: What a 411 says, the API's ``detail`` and the page's paragraph alike.
LENGTH_REQUIRED_TEXT = ("The request body must be sent with a Content-Length header: this server does not read a "
                        "body sent with Transfer-Encoding (chunked), so the request was not carried out.")


def transfer_codings(request: HttpRequest) -> list[str]:
    """The transfer codings ``request`` names (``Transfer-Encoding: gzip, chunked`` →
    ``["gzip", "chunked"]``, lower case), ``identity`` left out: ``[]`` for a body framed by its
    ``Content-Length`` or a request without a body."""
    header = request.META.get("HTTP_TRANSFER_ENCODING", "")
    codings = (part.strip().lower() for part in header.split(","))
    return [coding for coding in codings if coding and coding != "identity"]


def is_api_path(path: str) -> bool:
    """Whether ``path`` is the API's (``/api`` or under ``/api/``; ``/apiary`` is a page)."""
    return path == "/api" or path.startswith("/api/")


def length_required_response(request: HttpRequest) -> HttpResponse:
    """The 411 for a request whose body came with a transfer coding (see the module docstring)."""
    if is_api_path(request.path):
        return JsonResponse({"detail": LENGTH_REQUIRED_TEXT, "code": "length_required"}, status=411)
    return HttpResponse(loader.get_template("411.html").render({"reason": LENGTH_REQUIRED_TEXT}), status=411)


class LengthRequiredMiddleware(MiddlewareMixin):
    """Answers :func:`length_required_response` to a request sent with a transfer coding, before
    the rest of the stack (the CSRF check reads a form body) sees it. First in ``MIDDLEWARE``
    after ``SecurityMiddleware``."""

    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        return length_required_response(request) if transfer_codings(request) else None
