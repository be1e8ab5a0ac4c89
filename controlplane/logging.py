"""Log filter that redacts secret values before any handler writes a record."""
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
        if redacted != message:
            record.msg = redacted
            record.args = None
        return True
