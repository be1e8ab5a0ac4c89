"""Make values storable in a JSON column on every database Ceiling supports, and show a value in a
message in JSON's spelling (:func:`json_spelled`), its invisible characters as code points
(:func:`visible_text`).

JSON has no NaN or infinity (RFC 8259 §6); SQLite's ``JSON_VALID`` check and PostgreSQL's
``jsonb`` both refuse them. Measurements legitimately produce them (a ratio over an empty set,
the error-adjusted percentile of a run with failures, which is +inf by definition), so they are
stored as null, which a numeric reader treats as "no number" rather than misreading a sentinel
as a measurement. Where a null must say more than "unavailable" (+inf because of failures versus
no data), the producer stores the reason next to it: :func:`nonfinite_paths` lists where the
non-finite values were, e.g. the load generator's ``error_adjusted["infinite"]``
(``benchmarks/loadgen/metrics.py``).
"""
from __future__ import annotations

import json
import math
import unicodedata
from typing import Any

#: Unicode categories of the characters a quoted value shows as their code points (``<U+202E>``):
#: controls (Cc: NUL, BEL, ESC, tab, newline, the C1 range, DEL), format characters (Cf:
#: text-direction overrides and isolates, zero-width characters), line and paragraph separators
#: (Zl, Zp) and lone surrogates (Cs). Written as they are, they are invisible, reorder or recolour
#: the text around them, or break a line, so a message quoting one could read differently from
#: what it says.
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def code_point(c: str) -> str:
    """A character as its code point, ``<U+001B>``, ``<U+202E>``, ``<U+E0001>``."""
    return f"<U+{ord(c):04X}>"


def visible_text(text: str) -> str:
    r"""``text`` with each character of :data:`HIDDEN_CATEGORIES` written as its code point
    (:func:`code_point`): ``"a\u202eb"`` reads ``a<U+202E>b``, ``"a\x1b[31m"`` ``a<U+001B>[31m``."""
    return "".join(code_point(c) if unicodedata.category(c) in HIDDEN_CATEGORIES else c for c in text)


def quoted_text(text: str) -> str:
    r"""A text as a message quotes it, whole: in quotes (``'v32'``; ``"it's"`` when it holds a
    ``'`` and no ``"``; a quote of the other kind and a backslash escaped with a backslash), its
    hidden characters as code points (:func:`visible_text`: ``'h6<U+202E>test'``), never as
    Python's escapes (``'\u202e'``, ``'\x1b'``)."""
    shown = visible_text(text).replace("\\", "\\\\")
    if "'" in shown and '"' not in shown:
        return f'"{shown}"'
    return "'" + shown.replace("'", "\\'") + "'"


def query_text(value: Any) -> str:
    """A query parameter's (or a form body's) refused text as a message quotes it: cut to 40
    characters, then :func:`quoted_text` (``'abc'``, ``'-1'``, ``'<U+202E>1'``)."""
    return quoted_text(str(value)[:40])


def id_text(value: Any) -> str:
    """An id as a message shows it: digits bare, cut to 40 with the count of digits said when longer
    (``1234… (5000 digits)``, so a message never echoes a whole 5000-digit path segment); anything
    else as :func:`query_text` quotes it."""
    text = str(value)
    if not (text.isascii() and text.isdigit()):
        return query_text(text)
    return text if len(text) <= 40 else f"{text[:40]}… ({len(text)} digits)"


def json_safe(value: Any) -> Any:
    """Return ``value`` with NaN/±inf floats replaced by None, numpy scalars and arrays turned
    into Python numbers and lists, tuples into lists; dict keys become strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [json_safe(v) for v in value]
    item = getattr(value, "item", None)  # numpy scalar
    if callable(item) and getattr(value, "ndim", 0) == 0:
        return json_safe(item())
    tolist = getattr(value, "tolist", None)  # numpy array
    if callable(tolist):
        return json_safe(tolist())
    return value


def nonfinite_paths(value: Any, prefix: str = "") -> dict[str, str]:
    """Dotted paths (``"ttft_s.p99"``; list items by index, ``"points.2"``) of every NaN or ±inf
    float in ``value`` (dicts, lists, tuples, numpy scalars), mapped to ``"inf"``, ``"-inf"`` or
    ``"nan"``: what :func:`json_safe` will turn into null, so a caller can store it alongside."""
    out: dict[str, str] = {}
    item = getattr(value, "item", None)
    if not isinstance(value, (float, dict, list, tuple)) and callable(item) and getattr(value, "ndim", 0) == 0:
        value = item()
    if isinstance(value, float):
        if math.isnan(value):
            out[prefix] = "nan"
        elif math.isinf(value):
            out[prefix] = "inf" if value > 0 else "-inf"
    elif isinstance(value, dict):
        for k, v in value.items():
            out.update(nonfinite_paths(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            out.update(nonfinite_paths(v, f"{prefix}.{i}" if prefix else str(i)))
    return out


def json_number(value: float) -> str:
    """A float as JavaScript's ``JSON.stringify`` writes it (ECMAScript's Number to String): a
    whole number without Python's ``.0`` (``9``, ``1000000000`` for ``1e9``, ``100000``), negative
    zero as ``0``; where Python would use an exponent, ``1e-7`` (Python ``1e-07``), ``0.00001``
    (``1e-05``), ``10000000000000000`` (``1e+16``), ``1e+21``, ``1e+300``; otherwise as
    :func:`json.dumps` does (``0.25``, ``0.5``). Not finite: ``NaN``, ``Infinity``, ``-Infinity``
    (JSON has no text for them; its decoders write these)."""
    if value == 0:
        return "0"  # JSON.stringify(-0) is "0"
    text = repr(value)
    if not math.isfinite(value):
        return json.dumps(value)
    if "e" not in text:
        return text[:-2] if text.endswith(".0") else text
    mantissa, _, exponent = text.partition("e")
    sign = "-" if mantissa.startswith("-") else ""
    digits = mantissa.lstrip("-").replace(".", "").rstrip("0") or "0"
    k, n = len(digits), int(exponent) + 1  # n: where the decimal point falls after the first digit
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return f"{sign}{digits[:n]}.{digits[n:]}"
    if -6 < n <= 0:
        return f"{sign}0.{'0' * -n}{digits}"
    return f"{sign}{digits[0]}{'.' + digits[1:] if k > 1 else ''}e{'+' if n > 0 else '-'}{abs(n - 1)}"


def js_number(value: float) -> str:
    """A float as JavaScript writes a number, where a message names a quantity that may be
    fractional (a rate, seconds): :func:`json_number` (``10``, ``1000000``, ``0.5``, ``1e-7``)."""
    return json_number(value)


def json_text(value: Any, limit: int | None = None) -> str:
    r"""``value`` as :func:`json.dumps` writes it (``ensure_ascii=False``, ``default=str``), its
    floats spelled by :func:`json_number`, the hidden characters of its texts (keys included) as
    code points (:func:`visible_text`: ``["a<U+001B>b"]``, never ``["a\u001bb"]``). With
    ``limit``, the text may stop soon after ``limit`` characters (a caller cuts it there). Raises
    as :func:`json.dumps` would for a key JSON has no text for, and RecursionError for a value
    nested too deeply (or circular)."""
    parts: list[str] = []
    size = 0

    def put(text: str) -> bool:
        nonlocal size
        parts.append(text)
        size += len(text)
        return limit is None or size <= limit

    def walk(v: Any) -> bool:
        if isinstance(v, float):
            return put(json_number(v))
        if isinstance(v, (list, tuple)):
            if not put("["):
                return False
            for i, item in enumerate(v):
                if (i and not put(", ")) or not walk(item):
                    return False
            return put("]")
        if isinstance(v, dict):
            if not put("{"):
                return False
            for i, (key, item) in enumerate(v.items()):
                if not isinstance(key, str):
                    key = json.loads(json.dumps({key: 0}))  # JSON's text for the key, or its TypeError
                    key = next(iter(key))
                if (i and not put(", ")) or not put(json.dumps(visible_text(key), ensure_ascii=False) + ": ") or not walk(item):
                    return False
            return put("}")
        if isinstance(v, str):
            return put(json.dumps(visible_text(v), ensure_ascii=False))
        if not isinstance(v, (bool, int)) and v is not None:
            return put(json.dumps(visible_text(str(v)), ensure_ascii=False))  # what default=str writes
        return put(json.dumps(v, ensure_ascii=False, default=str))

    walk(value)
    return "".join(parts)


def json_spelled(value: Any, limit: int = 80) -> str:
    """A value as a message quotes it, the one spelling of every refusal that echoes input: a text
    by :func:`quoted_text` (``'v32'``, as messages quote names; ``'h6<U+202E>test'``), anything
    else in JSON's spelling (``true``, ``false``, ``null``, ``7``, ``1e-7``, ``[1, "a"]``, ``{"a": 1}``:
    :func:`json_text`), never Python's (``True``, ``None``, ``{'a': 1}``, ``1e-07``), cut to ``limit`` characters (``...`` at the end when
    cut). A value JSON cannot spell (a float that is not finite) reads as JSON's decoders write it
    (``NaN``, ``Infinity``); one it cannot encode at all as ``<type>``."""
    if isinstance(value, str):
        text = quoted_text(value[:limit])
    else:
        try:
            text = json_text(value, limit)
        except Exception:  # noqa: BLE001 - a circular or hostile value must not escape a message
            text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def finite_number(value: Any) -> bool:
    """Whether ``value`` is an int or a float (not a bool) that a float holds as a finite number:
    False for NaN and ±infinity, and for an integer too large for a double (about 1.8e308), which
    JSON parsers keep exact and :func:`math.isfinite` cannot convert (it raises ``OverflowError``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def whole_float(value: Any) -> bool:
    """Whether ``value`` is a finite float with a whole value (``1e3``, ``16.0``): a JSON number
    written with a decimal point or an exponent, which the API's integer fields refuse as the wrong
    type although :func:`json_number` quotes it as a whole number (``1000``, ``16``)."""
    return isinstance(value, float) and math.isfinite(value) and value == int(value)


def not_integer(value: Any, shown: str) -> str:
    """``shown``, a refused value's quote in a ``must be an integer`` message, with what made a
    whole number the wrong type when it is one: ``8000 written with a decimal point or exponent
    (write 8000)`` for ``8000.0`` or ``8e3`` (which JSON.stringify, hence the quote, writes as
    ``8000``); anything else as it is (``'8000'``, ``2.5``, ``true``)."""
    if whole_float(value):
        return f"{shown} written with a decimal point or exponent (write {int(value)})"
    return shown


def shown_value(value: Any) -> str:
    """A body value of the wrong type as a message names it: its JSON type and its JSON text cut
    to 40 characters (``the string "1"``, ``the number 9`` for ``9.0``, ``the boolean true``, ``null``,
    ``the list [8, 8, 8]``, ``the object {"a": 1}``; a longer text ends in ``…``)."""
    if value is None:
        return "null"
    kind = ("list" if isinstance(value, (list, tuple)) else "object" if isinstance(value, dict)
            else "boolean" if isinstance(value, bool) else "number" if isinstance(value, (int, float))
            else "string" if isinstance(value, str) else type(value).__name__)
    try:
        text = json_text_cut(value)
    except (ValueError, TypeError, RecursionError):   # nested deeper than the stack left here allows
        text = "[…" if kind == "list" else "{…" if kind == "object" else "…"
    return f"the {kind} {text}"


def json_text_cut(value: Any, limit: int = 40) -> str:
    """``value``'s JSON text (:func:`json_text`) as a refusal quotes it: at most ``limit``
    characters, a longer one cut to ``limit - 1`` and ``…`` (an integer of 400 digits, a long
    list). Raises as :func:`json_text` does."""
    text = json_text(value, limit)
    return text if len(text) <= limit else text[:limit - 1] + "…"
