"""One place that maps domain errors to HTTP responses for the whole API.

Every error body is JSON. Validation errors keep DRF's shape (``{"field": ["message"]}``,
nested paths as ``"roles.prefill.gpus"``); domain errors become ``{"detail": ..., "code": ...}``.
"""
from __future__ import annotations

import logging

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from controlplane.errors import CeilingError, Conflict, InvalidInput, NotFound

log = logging.getLogger(__name__)


def exception_handler(exc, context):
    """DRF exception handler: domain errors → 400/404/409, Django validation → 400."""
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
    return drf_exception_handler(exc, context)
