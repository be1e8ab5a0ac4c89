"""The classes REST framework's settings name (``DEFAULT_PARSER_CLASSES``,
``DEFAULT_PAGINATION_CLASS``, ``DEFAULT_CONTENT_NEGOTIATION_CLASS``,
``DEFAULT_PERMISSION_CLASSES``): the size-limited JSON parser, the page-size cap, the 400 naming a
``?format=`` no renderer answers in (:class:`FormatNegotiation`), the 400 naming a query key an
API read or write does not take (:class:`KnownQueryKeys`, beside :class:`SingleValuedQuery`'s for a key
given twice), and how that parser marks and locates numbers that are not finite and keys given
twice in one object (:class:`NonFiniteNumber`, :class:`RepeatedKeys`, :func:`json_loads`,
:func:`body_errors`, which also names a field a form-encoded or multipart body gives twice).

They live apart from :mod:`controlplane.api` on purpose. REST framework imports the classes its
settings name while ``rest_framework.views`` is being imported (``APIView``'s class body reads
``DEFAULT_PARSER_CLASSES``), and its system checks import ``DEFAULT_PAGINATION_CLASS`` before
any view module: a module named there must not itself import ``rest_framework.views`` or
``rest_framework.generics``, or the first of the two imports finds the other half-initialised.
This module imports neither; :mod:`controlplane.api` re-exports both classes.
"""
from __future__ import annotations

import io
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from django.conf import settings
from django.utils.datastructures import MultiValueDict
from rest_framework import status
from rest_framework.exceptions import APIException, NotAcceptable, ParseError, ValidationError
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.permissions import BasePermission
from rest_framework.parsers import JSONParser
from rest_framework.settings import api_settings

from controlplane.jsonsafe import json_spelled, json_text, query_text

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


class NonFiniteNumber(float):
    """A number of a JSON body that is not finite, as the body wrote it (``literal``): a ``NaN``,
    ``Infinity`` or ``-Infinity`` literal (not JSON, but Python's ``json`` reads them), or a number
    too large for a 64-bit float (``1e400``, ``-1E999``), which would otherwise read as ``inf``.

    It is the float it stands for (nan, inf or -inf), so code that judges numbers sees what it
    always saw; :func:`body_errors` finds each one with its path, to name it in a 400."""

    literal: str

    def __new__(cls, value: float, literal: str | None = None) -> NonFiniteNumber:
        number = super().__new__(cls, value)
        number.literal = literal if literal is not None else repr(float(value))
        return number

    def __reduce__(self):
        return (NonFiniteNumber, (float(self), self.literal))

    @property
    def is_constant(self) -> bool:
        """True for a ``NaN`` / ``Infinity`` / ``-Infinity`` literal, which is not JSON."""
        return self.literal in _JSON_CONSTANTS


_JSON_CONSTANTS = ("NaN", "Infinity", "-Infinity")


def _parse_constant(text: str) -> NonFiniteNumber:
    return NonFiniteNumber(float(text), text)


def _parse_float(text: str) -> float:
    value = float(text)
    return value if math.isfinite(value) else NonFiniteNumber(value, text)


class RepeatedKeys(dict):
    """An object of a JSON body that gives a key more than once (``{"recipe": 1, "recipe": 2}``):
    the dict Python's ``json`` makes of it (each key with its last value), and ``repeated``, each
    such key with every value given, in order. :func:`body_errors` names each such key at its
    path; no value of it is taken."""

    repeated: dict[str, list]


def _object_pairs(pairs: list[tuple[str, Any]]) -> dict:
    """``object_pairs_hook`` of :func:`json_loads`: a dict, or a :class:`RepeatedKeys` when a key
    comes more than once."""
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    given: dict[str, list] = {}
    for key, value in pairs:
        given.setdefault(key, []).append(value)
    marked = RepeatedKeys(obj)
    marked.repeated = {key: values for key, values in given.items() if len(values) > 1}
    return marked


def json_loads(text: str) -> Any:
    """``json.loads`` as the API reads a body: each number that is not finite becomes a
    :class:`NonFiniteNumber` and each object that gives a key more than once a
    :class:`RepeatedKeys`, for :func:`body_errors` to name. Raises what ``json.loads`` raises
    (``ValueError``, ``RecursionError``)."""
    return json.loads(text, parse_constant=_parse_constant, parse_float=_parse_float, object_pairs_hook=_object_pairs)


def _json_text(value: Any) -> str:
    """A value of a body in JSON's spelling (a :class:`NonFiniteNumber` as the body wrote it)."""
    if isinstance(value, NonFiniteNumber):
        return value.literal
    try:
        return json_text(value)  # floats as JSON.stringify writes them (1e9 as 1000000000)
    except (ValueError, RecursionError):
        return "…"


# Keys a browser's form post adds to the fields it sends: never a field, never refused (given
# twice either: a page may hold two forms' tokens).
FORM_ONLY_KEYS = frozenset({"csrfmiddlewaretoken"})

# Keys whose values a message never repeats (the token endpoint's password, a secret's value): one
# given twice is named with the count alone, as a 400's body may reach a log or a shared screen.
UNSHOWN_VALUE_KEYS = frozenset({"password", "value"})


def _given(value: dict) -> dict[str, list[str]]:
    """Each key of the object ``value`` given more than once, with every value given in order as
    a message shows it: a :class:`RepeatedKeys`'s in JSON's spelling, a form-encoded or multipart
    body's (a ``QueryDict``, its files among its fields) as sent, a file by its name
    (:data:`FORM_ONLY_KEYS` left out); ``{}`` for any other object."""
    if isinstance(value, RepeatedKeys):
        return {key: [_json_text(v) for v in values] for key, values in value.repeated.items()}
    if isinstance(value, MultiValueDict):
        return {key: [str(v) for v in values] for key, values in value.lists()
                if len(values) > 1 and key not in FORM_ONLY_KEYS}
    return {}


def _marks(data: Any, prefix: str, *, values_shown: bool = True):
    """``(path, message, kind)`` for each mark :func:`json_loads` left in ``data`` and each field a
    form body gives twice: ``kind`` "repeated" for a key given more than once (its values are not
    looked into; the message names them unless ``values_shown`` is false or the key is one of
    :data:`UNSHOWN_VALUE_KEYS`), "nonfinite" for a number that is not finite. No recursion: the
    parser accepts bodies nested deeper than Python's stack."""
    stack: list[tuple[str, Any]] = [(prefix, data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, NonFiniteNumber):
            yield path or "non_field_errors", f"{value.literal} is not a finite number", "nonfinite"
        elif isinstance(value, dict):
            repeated = _given(value)
            for key, values in repeated.items():
                yield (f"{path}.{key}" if path else str(key),
                       given_more_than_once(values, shown=values_shown and key not in UNSHOWN_VALUE_KEYS),
                       "repeated")
            # list(): a form body's QueryDict yields its items from a generator, not a view
            stack.extend((f"{path}.{key}" if path else str(key), item)
                         for key, item in reversed(list(value.items())) if key not in repeated)
        elif isinstance(value, list):
            stack.extend((f"{path}.{i}" if path else str(i), item) for i, item in reversed(list(enumerate(value))))


def body_errors(data: Any, prefix: str = "") -> dict[str, list[str]]:
    """``{"<dotted.path>": [message]}`` for what a body read by :func:`json_loads` holds that no
    check may take: each key given more than once in one object (``{"spec.roles.decode.port": ["is
    given 2 times (8001, 8002): give it once"]}``, the message of a repeated query parameter,
    :func:`given_more_than_once`, with the values in JSON's spelling; neither value is taken, so
    nothing under that key is judged) and each number that is not finite
    (``{"spec.roles.single.port": ["1e400 is not a finite number"]}``). List items are named by
    index (``grid.request_rates.1``); a body that is itself such a number sits under
    ``non_field_errors``; ``prefix`` is put before every path. Empty when there is none.

    A form-encoded or multipart body (a ``QueryDict``, which would hand a serializer the last value)
    is judged the same way: each field given more than once, a file field too, is named with the
    values as sent (``{"name": ["is given 2 times (a, b): give it once"]}``, a file by its name),
    :data:`FORM_ONLY_KEYS` left alone. A key of :data:`UNSHOWN_VALUE_KEYS` (``password``,
    ``value``) is named with its count alone in either kind of body (``is given 2 times: give it
    once``)."""
    errors: dict[str, list[str]] = {}
    for path, message, _kind in _marks(data, prefix):
        errors.setdefault(path, []).append(message)
    return errors


def repeated_key_errors(data: Any, prefix: str = "", *, values_shown: bool = True) -> dict[str, list[str]]:
    """The keys given more than once of :func:`body_errors` alone, for a page's JSON text field
    (whose numbers its own checks judge), a command's JSON option or a websocket frame; with
    ``values_shown`` false each message names the count alone (``is given 2 times: give it
    once``)."""
    errors: dict[str, list[str]] = {}
    for path, message, kind in _marks(data, prefix, values_shown=values_shown):
        if kind == "repeated":
            errors.setdefault(path, []).append(message)
    return errors


def nonfinite_number_errors(data: Any, prefix: str = "") -> dict[str, list[str]]:
    """The numbers that are not finite of :func:`body_errors` alone (``{"spec.stop_grace_s":
    ["1e400 is not a finite number"]}``), for a page's JSON text field read by :func:`json_loads`,
    so it refuses them as the API refuses them in a body."""
    errors: dict[str, list[str]] = {}
    for path, message, kind in _marks(data, prefix):
        if kind == "nonfinite":
            errors.setdefault(path, []).append(message)
    return errors


def shown_key(key: Any) -> str:
    """A body's key as an error message quotes it: :func:`controlplane.jsonsafe.json_spelled` of
    its text, cut to 80 characters."""
    return json_spelled(str(key))


def unknown_field_errors(data: Any, allowed: Iterable[str], *,
                         read_only: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """``{key: [message]}`` for each top-level key of the body ``data`` that is not in
    ``allowed`` (nothing when ``data`` is not an object, which the serializer reports itself):
    ``"unknown field 'foo'; allowed: name, spec"`` (``allowed: none`` when ``allowed`` is
    empty); a key of ``read_only`` (key → why it cannot
    be set, e.g. ``"it is set by the server"``) gets ``"'status' is read-only: <why>; allowed:
    ..."``. :data:`FORM_ONLY_KEYS` are left alone."""
    if not isinstance(data, Mapping):
        return {}
    allowed = list(allowed)
    read_only = read_only or {}
    names = ", ".join(allowed) or "none"
    errors: dict[str, list[str]] = {}
    for key in data:
        if key in allowed or key in FORM_ONLY_KEYS:
            continue
        if key in read_only:
            errors[str(key)] = [f"{shown_key(key)} is read-only: {read_only[key]}; allowed: {names}"]
        else:
            errors[str(key)] = [f"unknown field {shown_key(key)}; allowed: {names}"]
    return errors


class RefusedBody(ValidationError):
    """A JSON body the parser refuses on its own: one that gives a key more than once in an object
    (taking the last value silently would answer a question the client did not ask: a stale
    ``expected_version`` followed by the current one would pass the version check) or holds a
    ``NaN``, ``Infinity`` or ``-Infinity`` literal (not JSON). A 400 whose body names every
    problem of :func:`body_errors` at its path, the flat shape of every 400. ``data`` is the body
    as parsed (marked by :func:`json_loads`), for a view that checks the rest of the body too
    (:func:`controlplane.api.request_body`)."""

    def __init__(self, errors: dict[str, list[str]], data: Any) -> None:
        super().__init__(errors)
        self.data = data


#: The UTF-8 byte order mark as text (U+FEFF): editors on Windows start a file with it. It is no
#: part of the JSON (RFC 8259 lets a reader ignore it), so every JSON reader here (request bodies,
#: the recipe form, result-file imports) skips it at the start.
BOM = "\ufeff"


def json_loads_body(body: bytes, encoding: str) -> Any:
    """A request body read as :func:`json_loads` reads text, after decoding it with ``encoding``
    and skipping a byte order mark at its start (U+FEFF, which ``json.loads`` refuses: ``{"a": 1}``
    saved as "UTF-8 with BOM" is the same JSON). Raises :class:`ParseError` (400) worded in plain
    terms, with where the problem is:

    - not JSON: ``the request body is not valid JSON: expecting value (line 1 column 10)``, the
      reason Python's parser gives, its first letter lower case, then its line and column (both
      counted from 1, the column in characters);
    - not text in ``encoding``: ``the request body is not valid UTF-8 text: byte 0xff at offset 12
      (invalid start byte)``, the offset in bytes from 0;
    - nested deeper than Python's parser can follow (a few thousand levels of arrays or objects):
      ``the request body is nested too deeply to read: JSON arrays and objects may nest fewer than
      1000 levels`` (Python's recursion limit, less the frames of the request itself: about 900);
    - a whole number of more than 4300 digits, which Python refuses to convert: ``the request body
      holds a whole number of more than 4300 digits, which is not read``."""
    try:
        text = body.decode(encoding)
    except UnicodeDecodeError as exc:
        name = "UTF-8" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding
        raise ParseError(f"the request body is not valid {name} text: byte 0x{exc.object[exc.start]:02x} at offset "
                         f"{exc.start} ({exc.reason})") from exc
    except LookupError as exc:
        raise ParseError(f"the request body's encoding {json_spelled(encoding)} is not one this server knows") from exc
    text = text.removeprefix(BOM)
    try:
        return json_loads(text)
    except RecursionError as exc:
        raise ParseError("the request body is nested too deeply to read: JSON arrays and objects may nest fewer "
                         "than 1000 levels") from exc
    except json.JSONDecodeError as exc:
        reason = exc.msg[:1].lower() + exc.msg[1:]
        raise ParseError(f"the request body is not valid JSON: {reason} (line {exc.lineno} column {exc.colno})") from exc
    except ValueError as exc:  # a number of more than sys.get_int_max_str_digits() digits: int() refuses it
        raise ParseError(f"the request body holds a whole number of more than {sys.get_int_max_str_digits()} digits, "
                         "which is not read") from exc


class SafeJSONParser(JSONParser):
    """JSON parser with a body size limit that turns a pathologically nested body into a 400
    and locates numbers that are not finite.

    Size: a declared ``Content-Length`` over :func:`api_max_body_bytes` is refused with 413
    before a byte is read; otherwise at most limit + 1 bytes are read, and more than the
    limit is refused the same way, so the parser never sees an oversized body.

    Nesting: Python's ``json`` module raises ``RecursionError`` (not ``ValueError``) for
    bodies nested a few thousand levels deep, which DRF's parser would let through as a 500.

    Keys given more than once in one object (``{"recipe": 1, "recipe": 2}``), which Python's
    ``json`` would read as the last value: the body is refused with :class:`RefusedBody`, a 400
    naming each such key at its path (``{"spec.roles.decode.port": ["is given 2 times (8001,
    8002): give it once"]}``), as a query parameter given twice is refused.

    Numbers that are not finite: each is read as a :class:`NonFiniteNumber` remembering how
    the body wrote it. A ``NaN``, ``Infinity`` or ``-Infinity`` literal is not JSON: the body is
    refused with :class:`RefusedBody`, a 400 naming each such number at its path
    (``{"grid.duration_s": ["NaN is not a finite number"]}``). A number too large for a float
    (``1e400``) is JSON: it reads as an infinite :class:`NonFiniteNumber` for the input's own
    checks to judge (and to name with :func:`body_errors`). A refused body's 400 names every
    problem of both kinds (:func:`body_errors`).

    Text: a UTF-8 byte order mark at the start is skipped (editors on Windows write one); a body
    that is not JSON, not text in its encoding or nested too deeply is a 400 worded by
    :func:`json_loads_body` (``the request body is not valid JSON: expecting ',' delimiter (line 3
    column 5)``), not REST framework's ``JSON parse error - ...``.

    Raises:
        RequestTooLarge: the body is over the limit (413).
        ParseError: the body is not JSON, is not text in its encoding, or is nested too deeply.
        RefusedBody: the body repeats a key in an object or has a ``NaN`` / ``Infinity`` literal.
    """

    def parse(self, stream, media_type=None, parser_context=None):
        limit = api_max_body_bytes()
        parser_context = parser_context or {}
        request = parser_context.get("request")
        meta = getattr(request, "META", {}) or {}
        try:
            declared = int(meta.get("CONTENT_LENGTH") or 0)
        except (TypeError, ValueError):
            declared = 0
        if declared > limit:
            raise RequestTooLarge(limit)
        body = stream.read(limit + 1) if stream is not None else b""
        if len(body) > limit:
            raise RequestTooLarge(limit)
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        data = json_loads_body(body, encoding)
        if _refused(data):
            raise RefusedBody(body_errors(data), data)
        return data


def _refused(data: Any) -> bool:
    """True when ``data`` holds an object that repeats a key or a ``NaN`` / ``Infinity`` /
    ``-Infinity`` literal."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, NonFiniteNumber):
            if value.is_constant:
                return True
        elif isinstance(value, RepeatedKeys):
            return True
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


#: Most rows one page of a list endpoint returns; a larger ``?limit=`` returns this many.
MAX_PAGE_LIMIT = 500
#: Largest ``?offset=`` a list endpoint reads (15 digits): far past any list, and an ``OFFSET`` every
#: database takes; a larger one is a 400 that says this maximum.
MAX_PAGE_OFFSET = 10**15 - 1


def given_more_than_once(values: list[str], *, shown: bool = True) -> str | None:
    """The message for a query parameter that takes one value given ``len(values)`` times
    (``"is given 2 times (3, 4): give it once"``; with ``shown`` false, for a value no message may
    repeat such as a password, ``"is given 2 times: give it once"``); None for one value or none.
    Neither value is taken: taking the last one silently would answer a question the client did
    not ask."""
    if len(values) <= 1:
        return None
    if not shown:
        return f"is given {len(values)} times: give it once"
    return f"is given {len(values)} times ({', '.join(v[:40] for v in values[:8])}): give it once"


def empty_list_item(index: int, field: str, example: str) -> str:
    """The refusal of an empty item of a comma-separated query parameter (``?ids=1,,2``, ``?ids=1,2,``),
    one wording for every such list: ``item 2 is empty: give ids as 1,2,3``. An empty item is a typo
    or a list gone wrong, so it is refused rather than skipped."""
    return f"item {index} is empty: give {field} as {example}"


class SingleValuedQuery(BasePermission):
    """Every API request: a query parameter given more than once (``?status=ready&status=stopped``)
    is a 400 naming it (``{"status": ["is given 2 times (ready, stopped): give it once"]}``). No API
    parameter takes several values (lists are comma-separated in one value), and Django's
    ``QueryDict`` would otherwise hand each view the last one silently, answering a question the
    client did not ask. The ``?format=`` (or ``.<format>`` suffix) no renderer of the endpoint
    answers in, which :class:`FormatNegotiation` set aside, is named in the same 400
    (:func:`refused_format`). A key the action of a viewset does not take is named as unknown,
    however often it is given (``?run=2&run=10`` on ``/api/runs/compare/``: ``{"run": ["unknown
    field 'run'; allowed: ids, ..."]}``, :func:`unknown_query_errors`), never as given twice, which
    giving it once would only swap for that refusal. Every other problem of the query is named in
    the same 400 (:func:`query_problems`): a key not taken, a filter given empty, a value refused,
    a bad ``limit`` or ``offset``. A permission class after
    :class:`~controlplane.permissions.RolePermission`, so an unauthenticated or role-less request
    still gets its 401/403 first, whatever format it asked for."""

    def has_permission(self, request, view) -> bool:
        errors = query_problems(request, view)
        if errors:
            raise ValidationError(errors)
        return True


class Pagination(LimitOffsetPagination):
    """Every list endpoint: ``?limit=`` (default ``PAGE_SIZE``, 100; at most
    :data:`MAX_PAGE_LIMIT`, a larger value of any size is cut to it) and ``?offset=`` (at most
    :data:`MAX_PAGE_OFFSET`); the body is ``{"count", "next", "previous", "results"}``. An empty
    ``?limit=`` or ``?offset=`` is taken as not given (the default page). A ``limit`` that is not a
    whole number >= 1, an ``offset`` that is not a whole number from 0 to :data:`MAX_PAGE_OFFSET`
    (``must be a whole number between 0 and 999999999999999, got '-1'``, as a run's records word
    it), or either given twice, is a 400 naming it (DRF's own class answers such a value with the default page, or takes the last,
    silently)."""

    max_limit = MAX_PAGE_LIMIT
    limit_query_description = (
        f"Number of results to return per page (default 100, at most {MAX_PAGE_LIMIT}; a larger value "
        f"returns {MAX_PAGE_LIMIT}; empty: the default); not a whole number >= 1: 400."
    )
    offset_query_description = (
        f"The initial index from which to return the results (a whole number from 0 to {MAX_PAGE_OFFSET}; "
        "empty: 0); anything else: 400."
    )

    @staticmethod
    def _whole(request, name: str, least: int, most: int | None = None) -> int | None:
        """``?<name>=`` as a whole number >= ``least`` (and <= ``most`` when given), None when not
        given or empty. A number of more than 18 digits reads as 10**18: past every bound here, and
        ``int()`` refuses a text of more than 4300 digits. The refusal gives the range: ``must be a
        whole number >= 1, got 'abc'`` (a limit: a larger one is cut, never refused), ``must be a
        whole number between 0 and 999999999999999, got '-1'`` (an offset, in the words of every
        other offset of the API: a run's records, a kernel job's variant table)."""
        repeated = given_more_than_once(request.query_params.getlist(name))
        if repeated:
            raise ValidationError({name: [repeated]})
        raw = request.query_params.get(name)
        if raw is None or raw == "":
            return None
        digits = raw.lstrip("0") or "0"
        value = int(digits) if re.fullmatch(r"[0-9]+", raw) and len(digits) <= 18 else 10**18
        if not re.fullmatch(r"[0-9]+", raw) or value < least or (most is not None and value > most):
            bounds = f">= {least}" if most is None else f"between {least} and {most}"
            raise ValidationError({name: [f"must be a whole number {bounds}, got {query_text(raw)}"]})
        return value

    def _page(self, request) -> tuple[int | None, int]:
        """``(limit, offset)`` as given (``None``, ``0`` when not); a 400 naming every one of the
        two that is wrong at once (``?limit=abc&offset=-1``: both), not the first alone."""
        errors: dict[str, Any] = {}
        values: dict[str, int | None] = {}
        for name, least, most in ((self.limit_query_param, 1, None), (self.offset_query_param, 0, MAX_PAGE_OFFSET)):
            try:
                values[name] = self._whole(request, name, least, most)
            except ValidationError as exc:
                errors.update(exc.detail)
        if errors:
            raise ValidationError(errors)
        return values.get(self.limit_query_param), values.get(self.offset_query_param) or 0

    def get_limit(self, request):
        limit, _offset = self._page(request)
        return self.default_limit if limit is None else min(limit, self.max_limit)

    def get_offset(self, request):
        return self._page(request)[1]


#: The attribute of a request on which :class:`FormatNegotiation` leaves the 400 of a format no
#: renderer answers in, for :class:`SingleValuedQuery` to raise after the role's 401/403.
REFUSED_FORMAT_ATTR = "_ceiling_refused_format"


def refused_format(request) -> dict[str, list[str]] | None:
    """The 400 body :class:`FormatNegotiation` set aside for ``request`` (``{"format": ["must be
    one of json, api; got 'csv'"]}``), None when its format is one a renderer answers in (or it
    gives none)."""
    return getattr(request, REFUSED_FORMAT_ATTR, None)


def _judges_own_format(view) -> bool:
    """True when ``view`` (an API view) says, through its ``judges_own_format()``, that the request's
    action judges its own ``?format=`` (an export's ``csv``, a download that takes none, the 404 of a
    path that is no endpoint): :class:`FormatNegotiation` then leaves any format to it."""
    judges = getattr(view, "judges_own_format", None)
    return bool(judges is not None and judges())


def _formats_judged(view) -> tuple[str, ...]:
    """The formats the action of ``view`` (a view that judges its own format) answers in, as the
    choices of the ``format`` field of a query serializer its ``query_keys`` name (an export's
    ``csv, json``; the comparison's ``json, csv, api``); empty when it names none (a download that
    takes no ``?format=``, the 404 of a path that is no endpoint)."""
    declared = (getattr(view, "query_keys", None) or {}).get(getattr(view, "action", None), ())
    for item in declared if isinstance(declared, (tuple, list)) else (declared,):
        field = item().fields.get(api_settings.URL_FORMAT_OVERRIDE) if isinstance(item, type) else None
        if field is not None and hasattr(field, "choices"):
            return tuple(str(choice) for choice in field.choices)
    return ()


def _raises_refused_format(view) -> bool:
    """True when ``view`` (an API view) checks :class:`SingleValuedQuery`, which raises the refusal
    :class:`FormatNegotiation` sets aside."""
    try:
        return any(isinstance(permission, SingleValuedQuery) for permission in view.get_permissions())
    except Exception:   # a view whose permissions cannot be listed here: refused at once
        return False


class FormatNegotiation(DefaultContentNegotiation):
    """Every API endpoint: a ``?format=`` (or a ``.<format>`` suffix of the path) that none of the
    endpoint's renderers answers in is a 400 naming the format and those the endpoint offers
    (``{"format": ["must be one of json, api; got 'csv'"]}``; ``api`` is the browsable page), the
    answer of an export's own ``?format=xml``, instead of DRF's bare 404 ``{"detail": "Not
    found."}``. A ``?format=`` given more than once whose last value no renderer answers in is the
    400 of a repeated parameter (:class:`SingleValuedQuery`). An action that serves a format
    itself (an export's ``?format=csv``) forces the negotiation and judges the format itself
    (:class:`controlplane.api.ExportFormatMixin`).

    Content negotiation runs before authentication, so the refusal is not raised here: the
    endpoint's first renderer (JSON) answers, and the 400 is left on the request
    (:func:`refused_format`) for :class:`SingleValuedQuery`, a permission class after the role's,
    to raise. An anonymous request gets its 401, a role-less or under-privileged one its 403, as
    without the format. A view that does not check :class:`SingleValuedQuery` is refused here.

    A view whose ``judges_own_format()`` is true for the request's action (an export, a download,
    :class:`controlplane.notfound_views.ApiNotFoundView`) gets no refusal, whatever the format: the
    action judges the format itself, or answers the same whatever it is. Its answer, a refusal
    included, is rendered by a renderer of a format the action offers (:func:`_formats_judged`:
    the comparison's ``api`` is the browsable page) chosen by ``?format=`` or ``Accept`` as on any
    endpoint, else by its first renderer (JSON): an export's ``?format=api`` or a log download
    asked for with ``Accept: text/html`` is refused in JSON, not on a browsable page the action
    does not offer."""

    def select_renderer(self, request, renderers, format_suffix=None):
        name = self.settings.URL_FORMAT_OVERRIDE
        fmt = format_suffix or request.query_params.get(name)
        view = (getattr(request, "parser_context", None) or {}).get("view")
        if view is not None and _judges_own_format(view):
            offered = [renderer for renderer in renderers if renderer.format in _formats_judged(view)] or renderers[:1]
            if fmt and not any(renderer.format == fmt for renderer in offered):
                return offered[0], offered[0].media_type
            try:
                return super().select_renderer(request, offered, format_suffix)
            except NotAcceptable:   # an Accept none of them answers: the first, as a forced negotiation
                return offered[0], offered[0].media_type
        if fmt and not any(renderer.format == fmt for renderer in renderers):
            repeated = None if format_suffix else given_more_than_once(request.query_params.getlist(name))
            offered = ", ".join(dict.fromkeys(renderer.format for renderer in renderers))
            refusal = {name: [repeated or f"must be one of {offered}; got {query_text(fmt)}"]}
            if view is None or not _raises_refused_format(view):
                raise ValidationError(refusal)
            setattr(request, REFUSED_FORMAT_ATTR, refusal)
            return renderers[0], renderers[0].media_type
        return super().select_renderer(request, renderers, format_suffix)


#: The query keys of a paged action: :class:`Pagination`'s ``limit`` and ``offset``. A view's
#: ``list`` takes them without naming them (:func:`query_keys_taken`); another action that pages
#: (a recipe's versions, a deployment's events) names them in its ``query_keys``.
PAGE_KEYS = (Pagination.limit_query_param, Pagination.offset_query_param)


def declared_query_keys(view) -> list[str]:
    """The query keys ``view.query_keys`` names for the action of ``view`` (a viewset), a
    serializer class standing for its fields' names; empty when it names none."""
    declared = (getattr(view, "query_keys", None) or {}).get(getattr(view, "action", None), ())
    items = declared if isinstance(declared, (tuple, list)) else (declared,)
    keys: list[str] = []
    for item in items:
        keys.extend(item().fields if isinstance(item, type) else [item])
    return keys


def query_keys_taken(view) -> list[str]:
    """The query keys the action of ``view`` (a viewset) takes, in the order a message names them:
    what ``view.query_keys`` (action name → a serializer class, a key, or a tuple of both) holds
    for the action, a serializer class standing for its fields' names; then :data:`PAGE_KEYS` for
    a paged ``list``; then ``format`` (``?format=``, judged by :class:`FormatNegotiation`). An
    action ``query_keys`` does not name takes ``format`` alone. A key written ``<prefix><name>``
    (``p.<parameter>``) stands for every key that starts with ``<prefix>`` (``p.impl``)."""
    keys = declared_query_keys(view)
    if getattr(view, "action", None) == "list" and getattr(view, "paginator", None) is not None:
        keys.extend(PAGE_KEYS)
    keys.append(api_settings.URL_FORMAT_OVERRIDE)
    return list(dict.fromkeys(keys))


def unknown_query_errors(request, view) -> dict[str, list[str]]:
    """``{key: ["unknown field 'key'; allowed: <keys>"]}`` for each key of ``request``'s query that
    the action of ``view`` does not take (:func:`query_keys_taken`, the message of
    :func:`unknown_field_errors`: ``{"compiler": ["unknown field 'compiler'; allowed: package,
    device, shape, batch, limit, offset, format"]}``); empty when it takes every one. A key the
    viewset's ``query_key_hints`` (action name → {key: hint}) names for the action has the hint
    added: ``"unknown field 'run'; allowed: ids, ...; the comparison page's run= is ids= here"``."""
    taken = query_keys_taken(view)
    prefixes = tuple(key[:key.index("<")] for key in taken if "<" in key[1:])
    given = {key: None for key in request.query_params if not (prefixes and key.startswith(prefixes))}
    errors = unknown_field_errors(given, taken)
    hints = (getattr(view, "query_key_hints", None) or {}).get(getattr(view, "action", None), {})
    return {key: [f"{message}; {hints[key]}" if key in hints else message for message in messages]
            for key, messages in errors.items()}


#: Query keys of a list that order its rows rather than filter them: given empty they keep the
#: list's default order, as an empty ``?limit=`` or ``?offset=`` keeps the default page.
ORDER_KEYS = ("order", "ordering", "sort")


def empty_filter(name: str) -> str:
    """The refusal of a list filter given empty, one wording for every list:
    ``filter 'status' is empty: give a value or leave it out``."""
    return f"filter '{name}' is empty: give a value or leave it out"


def empty_query_value(name: str) -> str:
    """The refusal of a query parameter of an action other than a list given empty, one wording
    for every such action: ``query parameter 'since' is empty: give a value or leave it out``."""
    return f"query parameter '{name}' is empty: give a value or leave it out"


def _blank_taking_keys(view) -> set[str]:
    """The query keys ``view.query_keys`` declares for its action through a serializer field that
    takes a blank value on purpose (``allow_blank=True``: the comparison's ``ids=``, the node
    telemetry's ``fields=``, read as none given)."""
    declared = (getattr(view, "query_keys", None) or {}).get(getattr(view, "action", None), ())
    items = declared if isinstance(declared, (tuple, list)) else (declared,)
    return {name for item in items if isinstance(item, type)
            for name, field in item().fields.items() if getattr(field, "allow_blank", False)}


def empty_filter_errors(request, view) -> dict[str, list[str]]:
    """``{key: [message]}`` for each query key the action of a viewset declares given with an empty
    value: a list's filter (``?status=``, ``?recipe_name=``: :func:`empty_filter`'s words) or a
    query parameter of another read (``GET /api/deployments/7/telemetry/?since=``, ``?lines=`` of a
    process log, ``?version=`` of a dry run: :func:`empty_query_value`'s words). Paging's ``limit``
    and ``offset``, ``format`` and an order key (:data:`ORDER_KEYS`) keep their default when given
    empty, and so does a parameter of another read whose serializer field takes a blank on purpose
    (:func:`_blank_taking_keys`). REST framework reads an empty value of a field that is not
    required as not given, so a script whose variable was unset would otherwise be answered as if
    it had asked for nothing. Empty for an action that reports its query's problems itself."""
    action = getattr(view, "action", None)
    if action is None or action in getattr(view, "query_keys_reported_by_action", ()):
        return {}
    skipped = {*PAGE_KEYS, api_settings.URL_FORMAT_OVERRIDE, *ORDER_KEYS}
    if action != "list":
        skipped |= _blank_taking_keys(view)
    message = empty_filter if action == "list" else empty_query_value
    keys = [key for key in declared_query_keys(view) if key not in skipped and "<" not in key]
    return {key: [message(key)] for key in keys
            if key in request.query_params and request.query_params.get(key) == ""}


class KnownQueryKeys(BasePermission):
    """Every API request of a viewset, a read or a write: a query key its action does not take
    (``?compiler=nvcc`` on ``/api/kernel-best/``, ``?bogus=1`` on a detail, ``?dry=1`` on ``POST
    /api/recipes/``) is a 400 naming each such key and the keys taken
    (:func:`unknown_query_errors`), never ignored: a misspelt filter would otherwise answer with
    everything, and a write's key would pass for an option the write does not have. Each viewset
    names its keys per action in ``query_keys`` (:func:`query_keys_taken`); an action it does not
    name, as every write (create, update, destroy, a stop, a cancel, an import), takes ``format``
    alone. An action named in its ``query_keys_reported_by_action`` reports them itself, with every
    other problem of the query, through :func:`unknown_query_errors`. A permission class after
    :class:`SingleValuedQuery`, which already names every problem of the query in one 400
    (:func:`query_problems`: a key given twice, a key not taken, a filter given empty, a value
    refused, a bad ``limit``); this class asks the same for a view that lists it alone. The 401/403
    of the role come before either."""

    def has_permission(self, request, view) -> bool:
        errors = query_problems(request, view)
        if errors:
            raise ValidationError(errors)
        return True


def _declared_serializers(view) -> list[type]:
    """The serializer classes that judge the query values of the action of ``view`` (a viewset):
    those ``view.query_keys`` names for it, then the one ``view.query_serializers`` (action name →
    serializer class) names, for an action whose ``query_keys`` name its keys one by one (a
    deployment's telemetry takes ``since`` and ``until`` of the serializer that also has a node's
    ``fields``)."""
    action = getattr(view, "action", None)
    declared = (getattr(view, "query_keys", None) or {}).get(action, ())
    items = [*(declared if isinstance(declared, (tuple, list)) else (declared,)),
             (getattr(view, "query_serializers", None) or {}).get(action)]
    return list(dict.fromkeys(item for item in items if isinstance(item, type)))


def _pages(view) -> bool:
    """True when the action of ``view`` (a viewset) pages with :class:`Pagination`: a ``list``, or
    an action whose ``query_keys`` name :data:`PAGE_KEYS` as keys (a recipe's versions, a
    deployment's events), not through a serializer of its own (a run's records)."""
    if not isinstance(getattr(view, "paginator", None), Pagination):
        return False
    declared = (getattr(view, "query_keys", None) or {}).get(getattr(view, "action", None), ())
    items = declared if isinstance(declared, (tuple, list)) else (declared,)
    return getattr(view, "action", None) == "list" or all(key in items for key in PAGE_KEYS)


def query_value_errors(request, view, *, left_out: Iterable[str] = ()) -> dict[str, Any]:
    """``{key: [message]}`` for each value of the query of ``request`` that the action of ``view``
    (a viewset) refuses: those its ``query_keys`` serializers refuse (``?sweep=abc``: ``must be a
    whole number >= 1, got 'abc'``, in the words each field gives) and, for an action that pages
    (:func:`_pages`), a bad ``limit`` or ``offset`` (:class:`Pagination`). Only keys given are
    named: a key left out that the action needs (a diff's ``b``) is the action's to name, once the
    query's own problems are gone. The keys ``left_out`` (given twice, empty, unknown: already
    named) are judged as not given."""
    params = request.query_params
    left_out = set(left_out)
    if left_out:
        params = params.copy()
        for key in left_out:
            params.pop(key, None)
    errors: dict[str, Any] = {}
    for serializer_class in _declared_serializers(view):
        ser = serializer_class(data=params)
        if not ser.is_valid():
            for key, messages in ser.errors.items():
                if key in params:   # a key not given (one required, or one of two) is the action's to name
                    errors.setdefault(key, messages)
    if _pages(view):
        try:
            Pagination._page(view.paginator, _QueryOnly(params))
        except ValidationError as exc:
            for key, messages in exc.detail.items():
                errors.setdefault(key, messages)
    return errors


class _QueryOnly:
    """A stand-in request holding ``query_params`` alone, for :meth:`Pagination._page`."""

    def __init__(self, query_params) -> None:
        self.query_params = query_params


def query_problems(request, view) -> dict[str, Any]:
    """Every problem of the query of ``request`` to ``view``, in one ``{key: [message]}`` (empty
    when there is none), so that one 400 names them all, never the first alone: a key given twice
    (:func:`given_more_than_once`), a ``?format=`` no renderer answers in (:func:`refused_format`)
    and, for an action of a viewset, a key it does not take (:func:`unknown_query_errors`), a
    filter given empty (:func:`empty_filter_errors`) and a value it refuses
    (:func:`query_value_errors`: a wrong type or choice, a bad ``limit``). ``?status=&sweep=abc`` is
    both ``status`` (empty) and ``sweep`` (not a whole number); ``?sweep=abc&limit=0&foo=1`` names
    all three keys.

    The values an action that is not a ``list`` refuses are named here only beside another
    problem: alone, the action judges them itself (after its 404 for an object that does not
    exist). An action named in the viewset's ``query_keys_reported_by_action`` reports its query's
    problems itself, every one at once; it never sees a query with a key given twice or a refused
    format, so those are named here with the unknown keys and the values refused beside them."""
    viewset = hasattr(view, "action")
    unknown = unknown_query_errors(request, view) if viewset else {}
    repeated = {name: [message] for name, values in request.query_params.lists()
                if name not in unknown and (message := given_more_than_once(values))}
    for name, messages in (refused_format(request) or {}).items():
        repeated.setdefault(name, messages)
    if not viewset:
        return repeated
    if view.action in getattr(view, "query_keys_reported_by_action", ()):
        if not repeated:
            return {}
        errors = {**unknown, **repeated}
        empty = [key for key, values in request.query_params.lists() if values == [""]]
        for key, messages in query_value_errors(request, view, left_out=[*errors, *empty]).items():
            errors.setdefault(key, messages)
        return errors
    errors: dict[str, Any] = {**empty_filter_errors(request, view), **unknown, **repeated}
    if errors or view.action == "list":
        for key, messages in query_value_errors(request, view, left_out=errors).items():
            errors.setdefault(key, messages)
    return errors
