"""Whole numbers typed into a request (a query parameter, a form field, a path, a command-line
option): one rule for reading them.

Python's ``int()`` refuses a text of more than ``sys.get_int_max_str_digits()`` digits (4300 by
default, CVE-2020-10735) with a ``ValueError``, so ``int(text)`` on what a client sent, even after
checking that it is digits alone, answers ``"9" * 5000`` with a 500. :func:`whole_number` bounds
the length first: a number of more than :data:`MAX_DIGITS` digits is past every id, version,
batch and count Ceiling stores, so it is not read at all, and each caller refuses it with the
message it gives any number that names nothing (``no deployment #999…``, ``'999…' is not a batch
size of the manifest``)."""
from __future__ import annotations

import re

#: ASCII digits alone (``str.isdigit()`` also takes ``"²"``, which ``int()`` refuses, and ``int()``
#: takes ``"１"``, ``"1_000"`` and surrounding spaces).
DIGITS_RE = re.compile(r"[0-9]+")
#: An optional ``-`` then ASCII digits.
SIGNED_DIGITS_RE = re.compile(r"-?[0-9]+")
#: The most digits (leading zeros not counted) a number read from a request may have: every such
#: number fits a signed 64-bit integer, the widest integer column of every database Ceiling uses.
MAX_DIGITS = 18


def whole_number(text: str, *, signed: bool = False, max_digits: int = MAX_DIGITS) -> int | None:
    """``text`` as an ``int`` when it is ASCII digits alone (after a ``-`` when ``signed``) of at most
    ``max_digits`` digits, leading zeros not counted (``"007"`` is 7); None otherwise, without
    calling ``int()`` on a text it would refuse. ``whole_number("9" * 5000)`` is None."""
    if not isinstance(text, str) or not (SIGNED_DIGITS_RE if signed else DIGITS_RE).fullmatch(text):
        return None
    sign, digits = ("-", text[1:]) if text.startswith("-") else ("", text)
    digits = digits.lstrip("0") or "0"
    if len(digits) > max_digits:
        return None
    return int(sign + digits)


def too_many_digits(text: str, *, signed: bool = False, max_digits: int = MAX_DIGITS) -> bool:
    """Whether ``text`` is a whole number (as :func:`whole_number` reads one) that has more than
    ``max_digits`` digits: a number, but past every one that names something."""
    if not isinstance(text, str) or not (SIGNED_DIGITS_RE if signed else DIGITS_RE).fullmatch(text):
        return False
    return len(text.removeprefix("-").lstrip("0")) > max_digits


def number_shown(text: str, limit: int = 40) -> str:
    """A whole number as a message names it when it may be too long to read (:func:`whole_number`):
    its digits without leading zeros, cut to ``limit`` characters with ``…`` (``999…``)."""
    sign, digits = ("-", text[1:]) if text.startswith("-") else ("", text)
    shown = sign + (digits.lstrip("0") or "0")
    return shown if len(shown) <= limit else shown[:limit - 1] + "…"
