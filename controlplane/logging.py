"""Log filters: secret redaction before any handler writes a record, and one-line client errors."""
from __future__ import annotations

import logging

from controlplane.redaction import redact_text


class RedactSecretsFilter(logging.Filter):
    """Replace every known secret value and token-looking argument in a log record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is logged as is, never dropped
            return True
        redacted = redact_text(message)
        if redacted == message:
            return True
        # Arguments masked one by one where that masks the whole message: a formatter that reads
        # record.args (uvicorn's access formatter unpacks them) keeps working.
        if isinstance(record.args, tuple) and record.args:
            args = tuple(redact_text(a) if isinstance(a, str) else a for a in record.args)
            try:
                kept = str(record.msg) % args
            except Exception:  # noqa: BLE001 - falls back to the masked message below
                kept = None
            if kept is not None and redact_text(kept) == kept:
                record.args = args
                return True
        record.msg = redacted
        record.args = None
        return True


class ClientErrorOneLineFilter(logging.Filter):
    """Drop the traceback of a 4xx response record, keeping one line; 5xx records keep theirs.

    Django logs a ``PermissionDenied`` / ``Http404`` raised in a view through
    ``django.utils.log.log_response`` with ``exc_info`` set, so every 403 wrote a full stack to
    the web log although nothing failed. Records carry the HTTP status in ``status_code``
    (Django's ``extra``); for 400-499 the exception's type and message are appended to the
    message instead (``Forbidden (Permission denied): /recipes/new/ [PermissionDenied: ...]``).
    Attached to the ``django.request`` logger, so it runs before every handler.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if not isinstance(status, int) or not 400 <= status < 500 or not record.exc_info:
            return True
        exc = record.exc_info[1] if isinstance(record.exc_info, tuple) else None
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is logged as is, never dropped
            message = str(record.msg)
        if exc is not None:
            detail = " ".join(str(exc).split())
            message = f"{message} [{type(exc).__name__}{': ' + detail if detail else ''}]"
        record.msg = message
        record.args = None
        record.exc_info = None
        record.exc_text = None
        return True
