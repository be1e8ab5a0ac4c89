"""One place that maps domain errors to HTTP responses for the whole API.

Every error body is JSON. Validation errors are one flat object mapping a dotted field path to
its messages (``{"spec.roles.prefill.gpus": ["..."]}``), whether they come from a serializer
(nested errors are flattened by :func:`flatten_errors`) or a service's ``InvalidInput``; domain
errors become ``{"detail": ..., "code": ...}``.
"""
from __future__ import annotations

import logging

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import status
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import JSONParser
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from controlplane.errors import CeilingError, Conflict, InvalidInput, NotFound

log = logging.getLogger(__name__)


class SafeJSONParser(JSONParser):
    """JSON parser that turns a pathologically nested body into a 400.

    Python's ``json`` module raises ``RecursionError`` (not ``ValueError``) for bodies nested
    a few thousand levels deep, which DRF's parser would let through as a 500.
    """

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            raise ParseError("JSON parse error - nested too deeply.") from exc


def flatten_errors(detail, prefix: str = "") -> dict[str, list]:
    """Flatten DRF's nested error structure into ``{"a.b.0.c": [messages]}``.

    Nested serializers report ``{"roles": {"prefill": {"gpus": [...]}}}`` and list fields
    ``{"items": {0: [...]}}`` or ``[{}, {...}]``; clients get one flat, dotted shape everywhere.
    """
    out: dict[str, list] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            out.update(flatten_errors(value, path))
    elif isinstance(detail, list) and any(isinstance(item, (dict, list)) for item in detail):
        for index, item in enumerate(detail):
            if item in ({}, []):
                continue
            path = f"{prefix}.{index}" if prefix else str(index)
            if isinstance(item, (dict, list)):
                out.update(flatten_errors(item, path))
            else:
                out.setdefault(prefix or "detail", []).append(item)
    else:
        items = detail if isinstance(detail, list) else [detail]
        out.setdefault(prefix or "detail", []).extend(items)
    return out


def exception_handler(exc, context):
    """DRF exception handler: domain errors → 400/404/409, Django validation → 400.

    Every 400 from validation has the same body: ``{"<dotted.path>": ["message", ...]}``.
    """
    if isinstance(exc, InvalidInput):
        exc = ValidationError(exc.errors)
    elif isinstance(exc, DjangoValidationError):
        exc = ValidationError(exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages})
    elif isinstance(exc, NotFound):
        exc = Http404(str(exc))
    elif isinstance(exc, Conflict):
        return Response({"detail": str(exc), "code": "conflict"}, status=status.HTTP_409_CONFLICT)
    elif isinstance(exc, CeilingError):
        return Response({"detail": str(exc), "code": exc.code}, status=exc.http_status)
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, ValidationError):
        response.data = flatten_errors(response.data)
    return response
