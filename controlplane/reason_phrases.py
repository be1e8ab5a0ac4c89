"""Reason phrases of HTTP status lines under daphne.

An ASGI response carries only the status number; daphne hands it to Twisted's
``Request.setResponseCode``, which looks the phrase up in ``twisted.web.http.RESPONSES`` and
writes ``Unknown Status`` for a code missing there. Twisted's table lacks 429, so the sign-in
limit (:mod:`controlplane.login_throttle`) and the API's throttles went out as ``HTTP/1.1 429
Unknown Status``; 422, 423, 428, 431 and a few more were missing too. :func:`reason_phrases_fill`
adds every code Python's :class:`http.HTTPStatus` knows that the table lacks, with the standard
phrase (``Too Many Requests``); codes already there keep Twisted's words.
"""
from __future__ import annotations

from http import HTTPStatus


def reason_phrases_fill() -> list[int]:
    """Add the missing phrases to Twisted's table (see the module docstring). Returns the codes
    added, ascending (``[]`` once done, or when Twisted is not installed: no daphne then)."""
    try:
        from twisted.web import http as twisted_http
    except ImportError:
        return []
    added = []
    for status in HTTPStatus:
        if status.value not in twisted_http.RESPONSES:
            twisted_http.RESPONSES[status.value] = status.phrase.encode("ascii")
            added.append(status.value)
    return sorted(added)
