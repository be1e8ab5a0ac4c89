"""Domain errors raised by services; edges (API, views, tasks) map them to responses."""
from __future__ import annotations

from django.core.exceptions import BadRequest


class CeilingError(Exception):
    """Base class: a domain error with a stable ``code`` and an HTTP status for the API."""

    code = "error"
    http_status = 400


class InvalidInput(CeilingError):
    """Input failed validation. ``errors`` maps a field path (``roles.prefill.gpus``) to messages."""

    code = "invalid"
    http_status = 400

    def __init__(self, errors: dict[str, list[str]] | str):
        if isinstance(errors, str):
            errors = {"detail": [errors]}
        self.errors = errors
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))


class NotFound(CeilingError):
    code = "not_found"
    http_status = 404


class Conflict(CeilingError):
    """The request conflicts with current state (e.g. a deployment already running): HTTP 409."""

    code = "conflict"
    http_status = 409


class BadQuery(BadRequest):
    """A page's query parameter that is malformed (``?page=abc``, ``?version=x``, a key given
    twice): the client's error, a 400 page that says why (``handler400``), where a well-formed
    value naming nothing (``?page=99`` past the last page) stays a 404."""
