"""Secret redaction shared by every place a person or a log can see text.

Two layers: values registered at run time (a resolved secret's value is registered the moment
it is read, so later log lines containing it are masked), and patterns for well-known token
shapes (Hugging Face ``hf_...``, ``Bearer ...``, ``token=...``) that catch a secret pasted
where it should not be.
"""
from __future__ import annotations

import re
import threading

REDACTED = "***redacted***"

_lock = threading.Lock()
_known_values: set[str] = set()

_PATTERNS = [
    re.compile(r"\bhf_[A-Za-z0-9]{16,}\b"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"),
    # A key name standing alone (``token=...``, ``HF_TOKEN: ...``, ``api-key ...``), not the tail of a
    # longer identifier: ``eos_token: <|endoftext|>`` in an engine log is vocabulary, not a secret.
    # Environment-style names (upper case) ending in a secret word: HF_TOKEN=, DB_PASSWORD=.
    re.compile(r"(\b[A-Z0-9_]*(?:TOKEN|PASSWORD|SECRET|API_KEY)\s*[=:]\s*)[^\s,;'\"]{4,}"),
    re.compile(r"(?i)(\b(?:(?:hf|access|auth|api)[_-])?(?:api[_-]?key|token|password|secret)\s*[=:]\s*)[^\s,;'\"]{4,}"),
]


def register_secret_value(value: str) -> None:
    """Remember ``value`` so every later :func:`redact_text` masks it (values < 4 chars are ignored)."""
    if value and len(value) >= 4:
        with _lock:
            _known_values.add(value)


def redact_text(text: str) -> str:
    """Return ``text`` with registered secret values and token-shaped substrings masked."""
    if not text:
        return text
    with _lock:
        values = sorted(_known_values, key=len, reverse=True)
    for value in values:
        if value in text:
            text = text.replace(value, REDACTED)
    for pattern in _PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
        else:
            text = pattern.sub(REDACTED, text)
    return text
