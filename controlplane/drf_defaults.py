"""The classes REST framework's settings name (``DEFAULT_PARSER_CLASSES``,
``DEFAULT_PAGINATION_CLASS``): the size-limited JSON parser and the page-size cap.

They live apart from :mod:`controlplane.api` on purpose. REST framework imports the classes its
settings name while ``rest_framework.views`` is being imported (``APIView``'s class body reads
``DEFAULT_PARSER_CLASSES``), and its system checks import ``DEFAULT_PAGINATION_CLASS`` before
any view module: a module named there must not itself import ``rest_framework.views`` or
``rest_framework.generics``, or the first of the two imports finds the other half-initialised.
This module imports neither; :mod:`controlplane.api` re-exports both classes.
"""
from __future__ import annotations

import io

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import JSONParser

# Default cap on a JSON request body. The largest legitimate body is a recipe, a few KiB, so
# 1 MiB leaves ample room without letting a client make the server buffer and parse tens of
# MiB (json.loads of 20 MiB holds several times that in memory for seconds).
DEFAULT_MAX_BODY_BYTES = 1024 * 1024


class RequestTooLarge(APIException):
    """A request body over ``settings.CEILING_API_MAX_BODY_BYTES``: HTTP 413, refused before
    the body is read (or, without a usable Content-Length, as soon as the limit is passed)."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Request body too large."
    default_code = "too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(f"Request body too large: at most {limit} bytes are accepted.")
        self.limit = limit


def api_max_body_bytes() -> int:
    """The JSON body limit in bytes: ``settings.CEILING_API_MAX_BODY_BYTES`` (environment
    variable of the same name), else :data:`DEFAULT_MAX_BODY_BYTES`."""
    return int(getattr(settings, "CEILING_API_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES))


class SafeJSONParser(JSONParser):
    """JSON parser with a body size limit that turns a pathologically nested body into a 400.

    Size: a declared ``Content-Length`` over :func:`api_max_body_bytes` is refused with 413
    before a byte is read; otherwise at most limit + 1 bytes are read, and more than the
    limit is refused the same way, so the parser never sees an oversized body.

    Nesting: Python's ``json`` module raises ``RecursionError`` (not ``ValueError``) for
    bodies nested a few thousand levels deep, which DRF's parser would let through as a 500.
    """

    def parse(self, stream, media_type=None, parser_context=None):
        limit = api_max_body_bytes()
        request = (parser_context or {}).get("request")
        meta = getattr(request, "META", {}) or {}
        try:
            declared = int(meta.get("CONTENT_LENGTH") or 0)
        except (TypeError, ValueError):
            declared = 0
        if declared > limit:
            raise RequestTooLarge(limit)
        body = stream.read(limit + 1)
        if len(body) > limit:
            raise RequestTooLarge(limit)
        try:
            return super().parse(io.BytesIO(body), media_type, parser_context)
        except RecursionError as exc:
            raise ParseError("JSON parse error - nested too deeply.") from exc


#: Most rows one page of a list endpoint returns; a larger ``?limit=`` returns this many.
MAX_PAGE_LIMIT = 500


class Pagination(LimitOffsetPagination):
    """Every list endpoint: ``?limit=`` (default ``PAGE_SIZE``, 100; at most
    :data:`MAX_PAGE_LIMIT`, a larger value is cut to it) and ``?offset=``; the body is
    ``{"count", "next", "previous", "results"}``."""

    max_limit = MAX_PAGE_LIMIT
    limit_query_description = (
        f"Number of results to return per page (default 100, at most {MAX_PAGE_LIMIT}; a larger value "
        f"returns {MAX_PAGE_LIMIT})."
    )
