"""Typed readers for environment variables used by settings.

Each helper fails loudly (``ImproperlyConfigured``) on a value it cannot parse instead of
silently falling back, so a typo in a deployment's environment stops start-up with the
variable's name in the message.
"""
from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None, *, required: bool = False) -> str | None:
    """Return the variable as a string; ``required`` raises when it is unset or empty."""
    value = os.environ.get(name)
    if value is None or value == "":
        if required:
            raise ImproperlyConfigured(f"environment variable {name} is required")
        return default
    return value


def env_bool(name: str, default: bool = False) -> bool:
    """Parse 1/0, true/false, yes/no, on/off (case-insensitive)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false)")


def env_int(name: str, default: int) -> int:
    """Parse a base-10 integer."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None


def env_float(name: str, default: float) -> float:
    """Parse a float."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None


def env_list(name: str, default: list[str]) -> list[str]:
    """Parse a comma- or colon-separated list (empty items dropped)."""
    raw = os.environ.get(name)
    if raw is None:
        return list(default)
    parts = raw.replace(":", ",").split(",")
    return [p.strip() for p in parts if p.strip()]
