"""One place that maps domain errors to HTTP responses for the whole API.

Every error body is JSON. Validation errors are one flat object mapping a dotted field path to
its messages (``{"spec.roles.prefill.gpus": ["..."]}``), whether they come from a serializer
(nested errors are flattened by :func:`flatten_errors`) or a service's ``InvalidInput``; domain
errors become ``{"detail": ..., "code": ...}``. JSON bodies are size-limited by
:class:`SafeJSONParser` (``CEILING_API_MAX_BODY_BYTES``, default 1 MiB), which also names each
key given more than once in an object and each number that is not finite at its path
(``{"spec.roles.decode.port": ["is given 2 times (8001, 8002): give it once"]}``,
``{"spec.roles.single.port": ["1e400 is not a finite number"]}``; a repeated key or a ``NaN`` or
``Infinity`` literal alone makes a 400, and views that list every problem take the rest of the
body through :func:`request_body`). Input serializers refuse keys they do not take at their names
(:func:`unknown_field_errors`, :class:`StrictInputMixin`; an action that takes no body, such as a
stop or a cancel, through :func:`no_body`), and take a JSON
body's ids, integers and texts only as JSON integers and strings (:class:`StrictIntegerField`,
:class:`StrictIntegerMixin`, :class:`StrictCharField`, :class:`StrictSlugRelatedField`). A path
under ``/api/`` that no route matches is answered by
:class:`controlplane.notfound_views.ApiNotFoundView`: a JSON 404 like any other. The OpenAPI
schema describes these bodies with the components ``ValidationError``
(:class:`ValidationErrorSerializer`, the flat 400 body) and ``Detail``
(:class:`DetailSerializer`); every operation that needs credentials lists its 401 and 403 with a
``Detail`` body (:func:`postprocess_auth_errors`); list endpoints page with :class:`Pagination`.
"""
from __future__ import annotations

import json
import logging
import re

from collections.abc import Iterable, Mapping
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import MaxLengthValidator
from django.http import Http404, HttpResponse
from django.utils.http import content_disposition_header
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.plumbing import build_array_type, build_basic_type
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers, status
from rest_framework.exceptions import ErrorDetail, ParseError, UnsupportedMediaType, ValidationError
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.utils import html
from rest_framework.views import exception_handler as drf_exception_handler

from controlplane.drf_defaults import (  # noqa: F401 - part of this module's interface
    DEFAULT_MAX_BODY_BYTES, FORM_ONLY_KEYS, MAX_PAGE_LIMIT, MAX_PAGE_OFFSET, PAGE_KEYS, KnownQueryKeys,
    NonFiniteNumber, Pagination, RefusedBody, RepeatedKeys, RequestTooLarge, SafeJSONParser, UNSHOWN_VALUE_KEYS,
    api_max_body_bytes, body_errors, declared_query_keys, given_more_than_once, json_loads,
    query_keys_taken, repeated_key_errors, shown_key, unknown_field_errors, unknown_query_errors,
)
from controlplane.errors import CeilingError, Conflict, InvalidInput, NotFound
from controlplane.jsonsafe import not_integer, json_spelled, json_text, json_text_cut, query_text, shown_value  # noqa: F401 - part of this module's interface
from controlplane.lengths import LengthLimit
from controlplane.notfound_views import api_lookup_refused_text, api_not_found_text

log = logging.getLogger(__name__)


def flatten_errors(detail, prefix: str | None = None) -> dict[str, list]:
    """Flatten DRF's nested error structure into ``{"a.b.0.c": [messages]}``.

    Nested serializers report ``{"roles": {"prefill": {"gpus": [...]}}}`` and list fields
    ``{"items": {0: [...]}}`` or ``[{}, {...}]``; clients get one flat, dotted shape everywhere.
    Messages not under any key sit under ``detail``; a key that is the empty string keeps its
    name (``{"": ["unknown field ''; allowed: none"]}``), as any other key does.
    """
    out: dict[str, list] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            path = f"{prefix}.{key}" if prefix is not None else str(key)
            out.update(flatten_errors(value, path))
    elif isinstance(detail, list) and any(isinstance(item, (dict, list)) for item in detail):
        for index, item in enumerate(detail):
            if item in ({}, []):
                continue
            path = f"{prefix}.{index}" if prefix is not None else str(index)
            if isinstance(item, (dict, list)):
                out.update(flatten_errors(item, path))
            else:
                out.setdefault(prefix if prefix is not None else "detail", []).append(item)
    else:
        items = detail if isinstance(detail, list) else [detail]
        out.setdefault(prefix if prefix is not None else "detail", []).extend(items)
    return out


# REST framework's words for a body (or nested object) that is not a JSON object name Python types
# ("Invalid data. Expected a dictionary, but got list.", "No data provided"); clients speak JSON.
_NOT_AN_OBJECT = re.compile(r"Invalid data\. Expected a dictionary, but got (\w+)\.")
_JSON_KINDS = {"list": "an array", "tuple": "an array", "str": "a string", "int": "a number", "float": "a number",
               "NonFiniteNumber": "a number", "bool": "a boolean", "NoneType": "null"}
_ROOT_KEYS = (api_settings.NON_FIELD_ERRORS_KEY, "detail")


def json_object_wording(errors: dict[str, list], data: Any) -> dict[str, list]:
    """``errors`` (flat, :func:`flatten_errors`) with REST framework's Python wording for a value
    that is not a JSON object put in JSON terms: at the top level ``the body must be a JSON object,
    got an array`` (``a string``, ``a number``, ``a boolean``, ``null``) and, for an empty body,
    ``the body is empty: give a JSON object``; under a field ``must be a JSON object, got an
    array``. ``data`` is the request's parsed body (None for a JSON ``null``). Other messages are
    kept as they are; returns a new dict."""
    out: dict[str, list] = {}
    for path, messages in errors.items():
        root = path in _ROOT_KEYS
        reworded = []
        for message in messages:
            text, code = str(message), getattr(message, "code", None)
            match = _NOT_AN_OBJECT.fullmatch(text)
            if match and code == "invalid":
                kind = _JSON_KINDS.get(match.group(1), f"a {match.group(1)}")
                text = f"{'the body ' if root else ''}must be a JSON object, got {kind}"
            elif root and code == "null" and text == "No data provided":
                text = ("the body must be a JSON object, got null" if data is None
                        else "the body is empty: give a JSON object")
            else:
                reworded.append(message)
                continue
            reworded.append(ErrorDetail(text, code=code))
        out[path] = reworded
    return out


_MULTIPART_PREFIX = "Multipart form parse error - "


def body_parse_error(exc: ParseError) -> ValidationError:
    """A request body no parser could read, as the 400 every other body error is:
    ``{"non_field_errors": ["the request body is not valid JSON: expecting value (line 1 column
    10)"]}``. REST framework's multipart wording (``Multipart form parse error - Invalid boundary in
    multipart: None``) is put in plain words."""
    text = str(exc.detail)
    if text.startswith(_MULTIPART_PREFIX):
        text = multipart_error_text(text.removeprefix(_MULTIPART_PREFIX))
    return ValidationError({"non_field_errors": [ErrorDetail(text, code="parse_error")]})


def multipart_error_text(reason: str) -> str:
    """Django's :class:`~django.http.multipartparser.MultiPartParserError` message in plain
    words: ``Invalid boundary in multipart: None`` is ``the request body is not valid multipart
    form data: its Content-Type gives no boundary (multipart/form-data; boundary=...)``, another
    reason follows the same first words."""
    if reason.startswith("Invalid boundary in multipart"):
        return ("the request body is not valid multipart form data: its Content-Type gives no boundary "
                "(multipart/form-data; boundary=...)")
    return f"the request body is not valid multipart form data: {reason}"


def accepted_media_types(context) -> list[str]:
    """The content types the view's parsers take, in their order (``application/json`` first
    where the API's defaults apply), each once."""
    request, view = context.get("request"), context.get("view")
    parsers = getattr(request, "parsers", None)
    if parsers is None and view is not None and hasattr(view, "get_parsers"):
        parsers = view.get_parsers()
    types: list[str] = []
    for parser in parsers or ():
        media_type = getattr(parser, "media_type", "")
        if media_type and media_type not in types:
            types.append(media_type)
    return types


def unsupported_media_type(exc: UnsupportedMediaType, context) -> UnsupportedMediaType:
    """REST framework's 415 naming the content types the endpoint takes too: ``Unsupported media
    type "text/plain" in request; send application/json (or application/x-www-form-urlencoded or
    multipart/form-data)``, from the view's parser classes."""
    types = accepted_media_types(context)
    if not types:
        return exc
    send = f"send {types[0]}" + (f" (or {' or '.join(types[1:])})" if len(types) > 1 else "")
    return UnsupportedMediaType(None, detail=f"{str(exc.detail).rstrip('.')}; {send}")


def exception_handler(exc, context):
    """DRF exception handler: domain errors → 400/404/409, Django validation → 400, a body
    over the size limit → 413 ``{"detail", "code": "too_large", "limit_bytes"}``. A 404 of
    ``get_object_or_404`` names the object as the route keys it (``{"detail": "no node with name
    'nosuch'"}``, ``no benchmark run with id 999``; :func:`controlplane.notfound_views.api_not_found_text`),
    a key the lookup cannot take too (``no benchmark run with id 'abc'``;
    :func:`controlplane.notfound_views.api_lookup_refused_text`).

    Every 400 from validation has the same body: ``{"<dotted.path>": ["message", ...]}``, and a
    body that is not a JSON object is named in JSON terms (:func:`json_object_wording`). A body that
    cannot be read at all (not JSON, not text in its encoding, nested too deeply, multipart without a
    boundary) is a 400 of the same shape under ``non_field_errors`` (:func:`body_parse_error`), not
    REST framework's ``{"detail": "..."}``; a content type no parser takes stays a 415 ``{"detail"}``:
    the body was not judged, and the detail names the content types the endpoint takes
    (:func:`unsupported_media_type`).
    """
    if isinstance(exc, UnsupportedMediaType):
        exc = unsupported_media_type(exc, context)
    if isinstance(exc, ParseError):
        exc = body_parse_error(exc)
    if isinstance(exc, InvalidInput):
        exc = ValidationError(exc.errors)
    elif isinstance(exc, DjangoValidationError):
        exc = ValidationError(exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages})
    elif isinstance(exc, NotFound):
        exc = Http404(str(exc))
    elif isinstance(exc, Http404) and exc.args and isinstance(exc.args[0], str):
        # get_object_or_404's "No BenchmarkRun matches the given query." names a Python class
        view, request = context.get("view"), context.get("request")
        exc = Http404(api_not_found_text(exc.args[0], getattr(view, "kwargs", None) or {},
                                         getattr(request, "path", "")))
    elif isinstance(exc, Http404) and not exc.args and context.get("view") is not None:
        # REST framework's get_object_or_404 raises a bare Http404 for a key the lookup cannot take
        # (/api/runs/abc/: the ValueError of int("abc")), which would answer its bare "Not found."
        text = api_lookup_refused_text(context["view"], getattr(context.get("request"), "path", ""))
        exc = Http404(text) if text else exc
    elif isinstance(exc, Conflict):
        return Response({"detail": str(exc), "code": "conflict"}, status=status.HTTP_409_CONFLICT)
    elif isinstance(exc, RequestTooLarge):
        return Response({"detail": str(exc.detail), "code": "too_large", "limit_bytes": exc.limit},
                        status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    elif isinstance(exc, CeilingError):
        return Response({"detail": str(exc), "code": exc.code}, status=exc.http_status)
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, ValidationError):
        request = context.get("request")
        # the body as already parsed: reading request.data here could raise a parse error anew
        data = getattr(request, "_full_data", None) if request is not None else None
        response.data = json_object_wording(flatten_errors(response.data), data)
    return response


# --- error bodies in the OpenAPI schema -------------------------------------------------------

ERROR_SHAPE_HELP = (
    "Errors: HTTP 400 with a JSON object mapping a dotted field path to a list of messages, "
    'e.g. {"spec.roles.prefill.gpus": ["GPU 3 is also used by decode."]}.'
)


class ValidationErrorSerializer(serializers.Serializer):
    """Documents every 400 body of the API (schema component ``ValidationError``): one flat
    JSON object whose keys are dotted field paths and whose values are lists of messages,
    ``{"spec.roles.prefill.gpus": ["..."], "name": ["..."]}``; errors not tied to one field sit
    under ``non_field_errors`` or ``detail``. Never instantiated: :class:`ValidationErrorSchema`
    gives its schema, as :func:`exception_handler` produces the body."""


class ValidationErrorSchema(OpenApiSerializerExtension):
    """The OpenAPI schema of :class:`ValidationErrorSerializer`: an object with any keys, each
    an array of strings (a serializer cannot declare keys it does not know in advance)."""

    target_class = ValidationErrorSerializer

    def map_serializer(self, auto_schema, direction):
        return {
            **build_basic_type(OpenApiTypes.OBJECT),
            "additionalProperties": build_array_type(build_basic_type(OpenApiTypes.STR)),
            "description": "Keys are dotted field paths (`spec.roles.prefill.gpus`, `grid.concurrency.0`; "
            "`non_field_errors` or `detail` for an error of the whole input), values lists of messages. "
            "Every problem found is listed at once.",
            "example": {"name": ["Use 1-63 lowercase letters, digits, '.', '_' or '-', starting with a letter "
                                 "or digit; got \"Bad Name!\"."],
                        "spec.roles.prefill.gpus": ["GPU 3 is also used by role decode"]},
        }


class DetailSerializer(serializers.Serializer):
    """Documents 401/403/404/409/429 bodies (schema component ``Detail``):
    ``{"detail": "...", "code": "..."}``."""

    detail = serializers.CharField()
    code = serializers.CharField(required=False)


#: Responses for ``extend_schema(responses=...)``: a 400 with field errors, a 404, a 409.
ERRORS_400 = OpenApiResponse(ValidationErrorSerializer, description=ERROR_SHAPE_HELP)
ERROR_404 = OpenApiResponse(DetailSerializer, description="No such object (or version).")
ERROR_409 = OpenApiResponse(DetailSerializer, description="The change conflicts with current state.")

#: The 401 and 403 every operation that needs credentials can answer, as
#: :func:`postprocess_auth_errors` adds them: status code → description. Both bodies are
#: ``Detail`` (DRF's ``{"detail": "..."}``).
AUTH_ERRORS: dict[str, str] = {
    "401": 'No credentials, or a token or session that is not valid: `{"detail": "Authentication credentials '
           'were not provided."}` (or `"Invalid token."`).',
    "403": "Signed in, but the user's role does not allow this action (reads need viewer, writes operator, "
           'nodes and secrets admin), or the user is in no role group; the detail names the role needed and the '
           'user\'s: `{"detail": "This needs the operator role; you are a viewer."}` (`"...; your account has no '
           'role."`).',
}
#: The 400 every operation that needs credentials can answer for its query string, as
#: :func:`postprocess_auth_errors` adds it where the operation documents no 400 of its own.
QUERY_ERRORS_400 = (
    'A query key the action does not take (reads and writes alike: `{"dry": ["unknown field \'dry\'; allowed: '
    'format"]}`), a query parameter given twice (`{"status": ["is given 2 times (a, b): give it once"]}`) or a '
    '`?format=` no renderer answers in (`{"format": ["must be one of json, api; got \'csv\'"]}`), judged after '
    "the 401/403; " + ERROR_SHAPE_HELP
)
# The ``Detail`` component as drf-spectacular renders DetailSerializer, for a schema in which no
# operation names it (a partial schema); normally the generator has put it there already.
_DETAIL_COMPONENT = {
    "type": "object",
    "description": 'An error that is not about fields: `{"detail": "...", "code": "..."}`.',
    "properties": {"detail": {"type": "string"}, "code": {"type": "string"}},
    "required": ["detail"],
}
_HTTP_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})


def postprocess_auth_errors(result: dict, generator, request, public) -> dict:
    """drf-spectacular postprocessing hook (``SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]``):
    list the 401 and 403 of :data:`AUTH_ERRORS`, body ``Detail``, on every operation that needs
    credentials, i.e. whose ``security`` is not empty and has no ``{}`` (anonymous) entry, and
    the 400 of its query string (:data:`QUERY_ERRORS_400`, body ``ValidationError``) where it
    documents none. The token endpoint, open to anyone, keeps its own responses; an operation that
    documents its own 400, 401 or 403 keeps that one. Responses are ordered by status code.
    Returns ``result``, changed in place."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    detail_ref = {"$ref": "#/components/schemas/Detail"}
    error_ref = {"$ref": "#/components/schemas/ValidationError"}
    for operations in result.get("paths", {}).values():
        for method, operation in operations.items():
            security = operation.get("security") if method in _HTTP_METHODS else None
            if not security or {} in security:
                continue
            schemas.setdefault("Detail", _DETAIL_COMPONENT)
            responses = operation.setdefault("responses", {})
            for code, description in AUTH_ERRORS.items():
                responses.setdefault(code, {"content": {"application/json": {"schema": dict(detail_ref)}},
                                            "description": description})
            if "ValidationError" in schemas:
                responses.setdefault("400", {"content": {"application/json": {"schema": dict(error_ref)}},
                                             "description": QUERY_ERRORS_400})
            operation["responses"] = dict(sorted(responses.items()))
    return result


# A Sphinx cross-reference in a docstring: ``:func:`kernels.services.kernel_job_check` ``,
# ``:class:`~x.Y` ``, ``:meth:`title <x.Y.z>` ``; group 1 is what is between the backticks.
_SPHINX_ROLE_RE = re.compile(r":(?:py:)?[a-z]+:`([^`]+)`")


def _plain_reference(match: re.Match) -> str:
    """A Sphinx cross-reference as the reader sees it: a title where one is given (``title
    <target>``), else the target's last dotted part (``kernel_job_check``)."""
    text = match.group(1).strip()
    titled = re.fullmatch(r"(.+?)\s*<[^>]+>", text)
    if titled:
        return titled.group(1)
    return text.lstrip("~!").rsplit(".", 1)[-1]


def plain_description(text: str) -> str:
    """``text`` with every Sphinx cross-reference written as plain words
    (:func:`_plain_reference`)."""
    return _SPHINX_ROLE_RE.sub(_plain_reference, text)


def postprocess_plain_descriptions(result: dict, generator, request, public) -> dict:
    """drf-spectacular postprocessing hook (``SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]``):
    every ``description`` and ``summary`` in the schema, which drf-spectacular takes from
    docstrings, loses its Sphinx roles (``:func:`kernels.services.kernel_job_check` `` reads
    ``kernel_job_check``). Returns ``result``, changed in place."""
    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("description", "summary") and isinstance(value, str):
                    node[key] = plain_description(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(result)
    return result


# --- helpers shared by the apps' viewsets ------------------------------------------------------


def request_body(request) -> tuple[Any, dict[str, list[str]]]:
    """The request's body and the errors of its keys given more than once and its numbers that
    are not finite, for a view that reports them together with every other problem of the body.

    Returns ``(data, errors)``: ``data`` as parsed (a body that repeats a key or has a ``NaN`` or
    ``Infinity`` literal included, which :class:`SafeJSONParser` refuses on its own), ``errors``
    as :func:`body_errors` names them (``{"recipe": ["is given 2 times (1, 2): give it once"],
    "spec.roles.single.port": ["1e400 is not a finite number"]}``), empty when there is none. A
    form-encoded or multipart body's field given more than once (``name=a&name=b``, a file field
    too) is named the same way (``{"name": ["is given 2 times (a, b): give it once"]}``;
    :data:`FORM_ONLY_KEYS` left alone, a ``password`` or ``value`` by its count alone), where the
    form parsers would hand the serializer the last value. Pass ``errors`` to the input serializer
    as ``context["body_errors"]`` (:class:`StrictInputMixin` and the recipe input merge them with
    :func:`merge_body_errors`)."""
    try:
        data = request.data
    except RefusedBody as exc:
        data = exc.data
    return data, body_errors(data)


def merge_body_errors(errors: Mapping[str, Any], found: Mapping[str, list[str]]) -> dict[str, Any]:
    """``errors`` (a serializer's, nested or flat) with each path of ``found`` (:func:`body_errors`
    of the body) holding that message alone: what a check said of the value it saw there gives
    way to what the body wrote (``must be an integer port, got inf`` to ``1e400 is not a finite
    number``; the last value of a key given twice to ``is given 2 times (1, 2): give it once``),
    and nothing is said under a key given twice (``spec.roles...`` of a repeated ``spec``): none of
    its values is taken. Returns ``errors`` flattened (:func:`flatten_errors`) when ``found`` has
    anything, else ``errors`` as it is."""
    if not found:
        return dict(errors)
    merged = flatten_errors(dict(errors))
    for path in found:
        for key in [k for k in merged if k.startswith(f"{path}.")]:
            del merged[key]
        merged[path] = list(found[path])
    return merged


class StrictInputMixin:
    """For input serializers (put it before ``serializers.Serializer``): a body key that is not
    a writable field is refused at its name (:func:`unknown_field_errors`; read-only fields with
    the reason of :attr:`read_only_reasons`), and the keys given more than once and numbers that
    are not finite which the view passes as ``context["body_errors"]`` (:func:`request_body`) are
    named at their paths (:func:`merge_body_errors`), all in the same 400 as the fields' own
    errors."""

    #: Key → why a client cannot set it, for keys the API shows but does not take.
    read_only_reasons: Mapping[str, str] = {}

    def to_internal_value(self, data):
        extra = unknown_field_errors(data, [f.field_name for f in self._writable_fields],
                                     read_only=self.read_only_reasons)
        found = self.context.get("body_errors") or {}
        try:
            value = super().to_internal_value(data)
        except ValidationError as exc:
            if isinstance(exc.detail, Mapping):
                raise ValidationError(merge_body_errors({**exc.detail, **extra}, found)) from None
            raise
        if extra or found:
            raise ValidationError(merge_body_errors(extra, found))
        return value


class NoBodySerializer(StrictInputMixin, serializers.Serializer):
    """The body of an action that takes none (see :func:`no_body`): no field at all."""


def no_body(request) -> None:
    """Check the body of an action that takes none (a stop, a cancel): an empty body or ``{}``
    passes; a body with keys is a 400 naming each at its name (``{"force": ["unknown field
    'force'; allowed: none"]}``, :data:`FORM_ONLY_KEYS` left alone), and one that is not an object
    a 400 under ``non_field_errors``. Call it before the service that may answer 409: the body is
    judged before the state."""
    data, found = request_body(request)
    NoBodySerializer(data=data, context={"body_errors": found}).is_valid(raise_exception=True)


def shown_type(value: Any) -> str:
    """A refused value that must not be quoted (a password, a secret) as a message names it: its
    JSON type alone (``a string``, ``a number``, ``a boolean``, ``null``, ``a list``,
    ``an object``), never any of its text."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, (list, tuple)) else "an object"


class FormText(str):
    """A field's value as a form-encoded or multipart body gives it: text, the only thing a form
    can send (DRF's ``JSONField`` marks such values the same way)."""


class FormTextMixin:
    """For a field of an input serializer: a value from a form-encoded or multipart body comes
    to ``to_internal_value`` marked as :class:`FormText`, so a strict field can tell it from a
    JSON body's string."""

    def get_value(self, dictionary):
        value = super().get_value(dictionary)
        if html.is_html_input(dictionary) and isinstance(value, str):
            return FormText(value)
        return value


class StrictIntegerMixin(FormTextMixin):
    """For an integer or primary-key field of an input serializer (put it before the field
    class): a JSON body's value is taken only as a JSON integer; the string ``"1"``, the number
    ``1.0`` and ``true`` are refused as the wrong type (``must be an integer (e.g. 8), got the
    string "1"``, ``example`` the value the message suggests) instead of being coerced as DRF's
    fields do. A form-encoded or multipart body can send only text: its value (a
    :class:`FormText`) is judged by the field as DRF judges it."""

    def __init__(self, *, example: int = 8, **kwargs) -> None:
        self.example = example
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, FormText) and (isinstance(data, bool) or not isinstance(data, int)):
            raise serializers.ValidationError(f"must be an integer (e.g. {self.example}), got {not_integer(data, shown_value(data))}",
                                              code="invalid")
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            raise self._quoted(exc, data) from None
        if isinstance(value, int) and not within_bounds(self, value):
            # judged here: DRF's own bound validators say "Ensure this value ..." without it
            raise self._quoted(serializers.ValidationError("", code="min_value"), data)
        return value

    def _quoted(self, exc: serializers.ValidationError, data) -> serializers.ValidationError:
        """DRF's refusal of a value of the right type, rewritten to quote it as the rest of the API
        does: ``must be between 1 and 2147483647, got 0`` (for DRF's "Ensure this value is greater
        than or equal to 1."), ``must be the id of an existing recipe, got 99999999999999999999``
        (for DRF's ``Invalid pk "…" - object does not exist.``); a form body's text is quoted
        (``got '0'``)."""
        codes = exc.get_codes()
        code = codes[0] if isinstance(codes, list) and codes and isinstance(codes[0], str) else "invalid"
        shown = query_text(data) if isinstance(data, FormText) else json_text_cut(data)
        if code in ("min_value", "max_value"):
            return serializers.ValidationError(f"must be {whole_bounds(self)}, got {shown}", code=code)
        if code == "does_not_exist":
            model = getattr(getattr(self, "queryset", None), "model", None)
            noun = model._meta.verbose_name if model is not None else "object"
            return serializers.ValidationError(f"must be the id of an existing {noun}, got {shown}", code=code)
        return serializers.ValidationError(f"must be an integer (e.g. {self.example}), got {shown}", code=code)


class StrictBooleanField(FormTextMixin, serializers.BooleanField):
    """A boolean of a JSON body, taken only as JSON ``true`` or ``false``: ``"yes"``, ``"true"``,
    ``1`` or ``"on"`` are refused as the wrong type (``must be true or false, got the string
    "yes"``) instead of being read as true, as DRF's
    :class:`~rest_framework.fields.BooleanField` reads them. A form-encoded or multipart body
    sends only text (a file upload's ``allow_duplicate=true``, a checkbox's ``on``): its value
    (a :class:`FormText`) is judged by the field as DRF judges it."""

    def to_internal_value(self, data):
        if not isinstance(data, (bool, FormText)):
            raise serializers.ValidationError(f"must be true or false, got {shown_value(data)}", code="invalid")
        return super().to_internal_value(data)


class StrictIntegerField(StrictIntegerMixin, serializers.IntegerField):
    """An integer of a JSON body, taken only as a JSON integer (:class:`StrictIntegerMixin`),
    instead of being coerced as DRF's :class:`~rest_framework.fields.IntegerField` does."""


#: Codes of the text refusals Django and DRF add to every text field (a NUL, a lone surrogate),
#: dropped where a check of the product's own refused the same text (:class:`StrictTextMixin`).
GENERIC_TEXT_REFUSALS = frozenset({"null_characters_not_allowed", "surrogate_characters_not_allowed"})


class StrictTextMixin:
    """For a text or name field of an input serializer (put it before the field class): a JSON
    body's value is taken only as a JSON string; a number, a boolean, a list or an object is
    refused as the wrong type (``must be a string (e.g. "9.0"), got the number 9.0``; ``what`` is
    what the message asks for, ``example`` the value it suggests), and so is null where the field
    does not allow it (``..., got null``, not ``This field may not be null.``), instead of being
    turned into its text (``5`` → ``"5"``) as DRF's :class:`~rest_framework.fields.CharField` and
    :class:`~rest_framework.relations.SlugRelatedField` do. ``conceal``: the refusal names the
    value's type alone (:func:`shown_type`: ``got a number``), for a secret's value. A form-encoded
    or multipart body sends only text, so its values pass to the field as before."""

    def __init__(self, *, example: str = "", what: str = "a string", conceal: bool = False, **kwargs) -> None:
        self.example = example
        self.what = what
        self.conceal = conceal
        super().__init__(**kwargs)
        # null where the field does not allow it, in the same words (not "This field may not be null.")
        self.error_messages["null"] = self._wrong_type(None).replace("{", "{{").replace("}", "}}")

    def _wrong_type(self, data: Any) -> str:
        example = f" (e.g. {json.dumps(self.example)})" if self.example else ""
        shown = shown_type(data) if self.conceal else shown_value(data)
        return f"must be {self.what}{example}, got {shown}"

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError(self._wrong_type(data), code="invalid")
        return super().to_internal_value(data)

    def run_validators(self, value):
        """The field's validators, with the generic refusals of a NUL or a lone surrogate ("Null
        characters are not allowed.", "Surrogate characters are not allowed: U+D800.") left out
        where another of them refused the text too: the product's own checks say what and where
        (``U+0000 (NUL) at character 2``), and one problem is said once."""
        try:
            super().run_validators(value)
        except serializers.ValidationError as exc:
            said = exc.detail if isinstance(exc.detail, list) else None
            specific = [d for d in said or [] if getattr(d, "code", None) not in GENERIC_TEXT_REFUSALS]
            if said and specific and len(specific) < len(said):
                raise serializers.ValidationError(specific) from None
            raise


class JSONTypeWordingMixin:
    """For a list or object field of an input serializer (put it before the field class): a JSON
    body's value of another type is refused in the API's words, naming what the field takes and
    the value given (``must be a list of integers (e.g. [1, 8]), got the number 1``, ``must be an
    object (e.g. {"impl": ["split_k"]}), got the list [1]``; ``what`` is what the message asks for,
    ``example`` the value it suggests, written as JSON), and so is null where the field does not
    allow it (``..., got null``), instead of REST framework's ``Expected a list of items but got
    type "int".`` and ``This field may not be null.``. A form-encoded or multipart body's value is
    judged by the field as REST framework judges it."""

    #: The JSON type the field takes: ``list`` or ``dict``.
    json_type: type = list

    def __init__(self, *, what: str | None = None, example: Any = None, **kwargs) -> None:
        self.what = what or ("a list" if self.json_type is list else "an object")
        self.example = example
        super().__init__(**kwargs)
        # REST framework formats an error message with str.format: an example's braces are doubled
        self.error_messages["null"] = self._wrong_type(None).replace("{", "{{").replace("}", "}}")

    def _wrong_type(self, data: Any) -> str:
        example = f" (e.g. {json.dumps(self.example, ensure_ascii=False)})" if self.example is not None else ""
        return f"must be {self.what}{example}, got {shown_value(data)}"

    def to_internal_value(self, data):
        if not html.is_html_input(data) and not isinstance(data, (self.json_type, FormText)):
            raise serializers.ValidationError(self._wrong_type(data), code="invalid")
        return super().to_internal_value(data)


class StrictListField(JSONTypeWordingMixin, serializers.ListField):
    """A list of a JSON body, refused in the API's words when it is not one
    (:class:`JSONTypeWordingMixin`): ``"batches": 1`` is ``must be a list of integers (e.g. [1,
    8]), got the number 1``."""


class StrictCharField(StrictTextMixin, serializers.CharField):
    """A text of a JSON body, taken only as a JSON string (:class:`StrictTextMixin`): ``5`` is a 400
    (``must be a string, got the number 5``) instead of the text ``"5"``."""


class LimitedTextField(StrictCharField):
    """A :class:`StrictCharField` whose ``max_length`` is refused in the product's wording
    (:class:`controlplane.lengths.LengthLimit`: ``Use at most 255 characters; got 300.``, as names
    and change reasons are), not DRF's ``Ensure this field has no more than ...``; the schema
    still says ``maxLength``."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.validators = [LengthLimit(v.limit_value) if type(v) is MaxLengthValidator else v
                           for v in self.validators]


class BlankAsNullCharField(serializers.CharField):
    """An output text read from a blank-able model field (or a method that answers ``""`` when it
    has nothing to say), written as null where it is ``""``: a text that is absent is null in
    every JSON answer, never an empty string. Give it ``allow_null=True`` so the schema says so."""

    def to_representation(self, value):
        return None if value in ("", None) else super().to_representation(value)


class OptionalTextField(LimitedTextField):
    """A text an object may lack (a description), read and written through one field: in a body
    ``""`` and null both mean none and are stored as ``""`` (any other type is refused as
    :class:`StrictCharField` refuses it), in an answer none is null
    (:class:`BlankAsNullCharField`'s rule); the schema marks it nullable both ways. A text over
    its ``max_length`` gets :class:`LimitedTextField`'s message."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("allow_blank", True)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def validate_empty_values(self, data):
        is_empty, value = super().validate_empty_values(data)
        return (True, "") if is_empty and data is None else (is_empty, value)

    def to_representation(self, value):
        return None if value in ("", None) else super().to_representation(value)


class StrictSlugRelatedField(StrictTextMixin, serializers.SlugRelatedField):
    """An object named by a slug (a node by its name) in a JSON body, taken only as a JSON string
    (:class:`StrictTextMixin`): ``"node": 1`` is a 400 (``must be a node name (a string), got the
    number 1`` with ``what="a node name (a string)"``) instead of a look-up of the name ``"1"``.
    A name no object has is a 400 naming the kind and the value (``no node named 'gpu-9'``), not
    DRF's ``Object with name=gpu-9 does not exist.``"""

    def fail(self, key, **kwargs):
        if key == "does_not_exist":
            what = self.get_queryset().model._meta.verbose_name
            value = str(kwargs.get("value", ""))
            shown = value if len(value) <= 63 else value[:63] + "..."
            raise serializers.ValidationError(f"no {what} named {json_spelled(shown)}", code=key)
        return super().fail(key, **kwargs)


def created_by_field(what: str) -> serializers.SlugRelatedField:
    """The read-only ``created_by`` of an answer: the username of the user who did ``what`` (``"started
    the sweep"``), described in its own words, not the help text of the user model's ``username``
    (its rules for a new name, which an answer does not take)."""
    return serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True,
        help_text=f"username of the user who {what}; null when no user is recorded (done from the command "
                  "line) or that user has since been deleted")


class JSONTextField(serializers.JSONField):
    """DRF's :class:`~rest_framework.fields.JSONField` whose JSON text from a form-encoded or
    multipart body (a recipe's ``spec`` sent as a form field) is read as a JSON body is
    (:func:`json_loads`): an object in it that gives a key more than once is a 400 naming each such
    key at its dotted path under the field (``{"spec.roles.decode.port": ["is given 2 times (8001,
    8002): give it once"]}``), never its last value taken silently. Text that is not JSON is DRF's
    ``Value must be valid JSON.``; a JSON body's value is judged as DRF judges it."""

    def to_internal_value(self, data):
        if not (self.binary or getattr(data, "is_json_string", False)):
            return super().to_internal_value(data)
        try:
            value = json_loads(data.decode() if isinstance(data, bytes) else data)
        except (TypeError, ValueError, RecursionError):
            self.fail("invalid")
        repeated = repeated_key_errors(value)
        if repeated:
            raise serializers.ValidationError(repeated)
        return value


class AnyJSONField(JSONTextField):
    """A :class:`JSONTextField` that takes any JSON value, numbers that are not finite included
    (``1e400`` parses as ``inf``): DRF's check refuses those only as "Value must be valid JSON."
    for the whole value, so here they pass and the rules that judge the value name each at its own
    path (``{"grid.duration_s": [...]}``, ``{"params.BLOCK.0": ["1e400 is not a finite number"]}``),
    together with every other problem. A value that is no JSON at all (a Python object) is still
    ``invalid``; a form field's JSON text is read as :class:`JSONTextField` reads it."""

    def to_internal_value(self, data):
        if self.binary or getattr(data, "is_json_string", False):
            return super().to_internal_value(data)  # a form field's JSON text: a repeated key is named
        try:
            json.dumps(data, allow_nan=True)  # the check DRF makes, with infinities and NaN let through
        except (TypeError, ValueError):
            self.fail("invalid")
        return data


class _FormJSONText(str):
    """A form field's text that a :class:`JSONTextDictField` reads as JSON."""

    is_json_string = True


class JSONTextDictField(JSONTypeWordingMixin, serializers.DictField):
    """DRF's :class:`~rest_framework.fields.DictField` that, in a form-encoded or multipart body,
    also takes the whole object as JSON text in the field itself (``params={"impl": ["x"]}``), read
    as :class:`JSONTextField` reads it (a key given twice inside it, or a number that is not finite,
    ``1e400`` or ``NaN``, is a 400 at its dotted path, as in a JSON body);
    DRF reads only prefixed keys there (``params.impl=x``, which :class:`StrictInputMixin` refuses
    as unknown fields) and dropped such text silently, so the default (the whole grid) was taken
    instead. Text that is not JSON is ``Value must be valid JSON.``; a value that is not an object,
    in a JSON body or as that text, is refused naming what it is (:class:`JSONTypeWordingMixin`:
    ``must be an object (e.g. {"impl": ["split_k"]}), got the number 1``)."""

    default_error_messages = {"invalid_json": "Value must be valid JSON."}
    json_type = dict

    def get_value(self, dictionary):
        if html.is_html_input(dictionary) and self.field_name in dictionary:
            return _FormJSONText(dictionary[self.field_name])
        return super().get_value(dictionary)

    def to_internal_value(self, data):
        if isinstance(data, _FormJSONText):
            try:
                data = json_loads(data)
            except (TypeError, ValueError, RecursionError):
                self.fail("invalid_json")
            found = body_errors(data)  # keys given twice and numbers that are not finite, as in a JSON body
            if found:
                raise serializers.ValidationError(found)
        return super().to_internal_value(data)


class ExportFormatMixin:
    """For viewsets with an ``export`` action (and the other actions :attr:`format_actions` names):
    ``?format=csv|json`` names the file format the action answers in, not a DRF renderer, so
    content negotiation must not turn ``csv`` into a 400 for that action; the action checks the
    value itself (:class:`ExportQuerySerializer`). Only an action whose ``query_keys`` name
    ``format`` (a query serializer with a ``format`` field) is trusted to: for any other, a format no
    renderer answers in is refused by :class:`~controlplane.drf_defaults.FormatNegotiation` as on
    every endpoint, never handed to the action unjudged."""

    #: The actions whose ``?format=`` is a file format.
    format_actions: tuple[str, ...] = ("export",)

    def judges_own_format(self) -> bool:
        """True for an action of :attr:`format_actions` whose ``query_keys`` name ``format``: read by
        :class:`~controlplane.drf_defaults.FormatNegotiation`, which then refuses no format."""
        return self.action in self.format_actions and api_settings.URL_FORMAT_OVERRIDE in declared_query_keys(self)

    def perform_content_negotiation(self, request, force=False):
        return super().perform_content_negotiation(request, force=force or self.action in self.format_actions)


# Largest integer accepted for an id or version parameter: PostgreSQL's ``integer`` range, so a
# huge number is a 400 naming the parameter rather than a database overflow (SQLite raises
# OverflowError past 64 bits).
MAX_INT = 2**31 - 1

# An integer in a query parameter: ASCII digits with an optional sign. ``int()`` also takes "１"
# (fullwidth), "1_000" and surrounding spaces; ``str.isdigit()`` takes "²", which ``int()`` refuses.
_INTEGER_RE = re.compile(r"[+-]?[0-9]+")


def whole_bounds(field: serializers.IntegerField) -> str:
    """What an integer field takes, in words: ``between 1 and 2000``, ``at least 0`` or ``at most
    9``, from its ``min_value``/``max_value``; ``an integer`` when it has neither."""
    low, high = getattr(field, "min_value", None), getattr(field, "max_value", None)
    if low is not None and high is not None:
        return f"between {low} and {high}"
    if low is not None:
        return f"at least {low}"
    return f"at most {high}" if high is not None else "an integer"


def within_bounds(field: serializers.Field, value: int) -> bool:
    """Whether ``value`` lies within ``field``'s ``min_value`` and ``max_value`` (those it has)."""
    low, high = getattr(field, "min_value", None), getattr(field, "max_value", None)
    return (low is None or value >= low) and (high is None or value <= high)


class IdField(serializers.IntegerField):
    """An id, version number or count given as a query parameter: ASCII digits, 1 to
    :data:`MAX_INT` unless ``min_value``/``max_value`` say otherwise. Anything else is a 400
    naming the parameter and quoting the value (``{"lines": ["must be a whole number between 1
    and 2000, got 'abc'"]}``), never a filter the database cannot take."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", MAX_INT)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        refused = serializers.ValidationError(f"must be a whole number {whole_bounds(self)}, got {query_text(data)}",
                                              code="invalid")
        if isinstance(data, bool) or not isinstance(data, (str, int)):
            raise refused
        if isinstance(data, str) and not _INTEGER_RE.fullmatch(data):
            raise refused
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError:
            raise refused from None
        if not within_bounds(self, value):   # judged here: DRF's own bound validators do not quote it
            raise refused
        return value


class FilterChoiceField(serializers.ChoiceField):
    """A choice given as a query parameter (a list filter's ``status``, ``role``...) or a body field
    (a recipe's ``engine``): a value outside the choices is a 400 naming the field and every
    allowed value (``{"status": ["must be one of pending, running, done; got 'bogus'"]}``). A body's
    value that is no string is named by its JSON type and spelling, as every wrong-type refusal
    names it (``"engine": ["sim"]`` is ``must be one of ...; got the list ["sim"]``), never as
    Python writes it."""

    def to_internal_value(self, data):
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError:
            if isinstance(data, str):
                shown = json_spelled(data if len(data) <= 40 else data[:40] + "...")
            else:
                shown = shown_value(data)
            raise serializers.ValidationError(
                f"must be one of {', '.join(self.choice_strings_to_values)}; got {shown}",
                code="invalid_choice") from None


class ExportQuerySerializer(serializers.Serializer):
    """``?format=csv|json`` of an export action (default json); another format is a 400 naming the
    two (``{"format": ["must be one of csv, json; got 'xml'"]}``), the wording of a format no
    renderer answers in (:class:`controlplane.drf_defaults.FormatNegotiation`)."""

    format = FilterChoiceField(choices=["csv", "json"], default="json")


class QueryProblemsTogetherSerializer(serializers.Serializer):
    """A query's serializer whose 400 names every problem at once: each value's own (a field, its
    ``validate_<field>``) and those between values (:meth:`together_errors`: ``since`` after
    ``until``, neither ``ids`` nor ``sweeps`` given). REST framework's own serializer judges the
    values together only once every value is good, so ``?since=10&until=5&fields=a,,b`` would name
    ``fields`` alone, and the client would fix it, resend and meet ``since``."""

    def together_errors(self, attrs: dict, refused: set[str]) -> dict[str, list[str]]:
        """``{key: [message]}`` for the problems between the values of ``attrs`` (the fields read
        well, validated) that no single value shows; ``refused`` holds the keys already refused on
        their own, whose values ``attrs`` lacks (a check that needs one of them is left out: the
        value given is wrong, not missing). None here; a subclass names its own."""
        return {}

    def validate(self, attrs: dict) -> dict:
        if errors := self.together_errors(attrs, set()):
            raise serializers.ValidationError(errors)
        return attrs

    def to_internal_value(self, data):
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError as exc:
            errors = dict(exc.detail)
        attrs: dict[str, Any] = {}
        for name, field in self.fields.items():
            if field.read_only or name in errors:
                continue
            try:
                value = field.run_validation(field.get_value(data))
                if (validate_field := getattr(self, f"validate_{name}", None)) is not None:
                    value = validate_field(value)
            except (serializers.SkipField, serializers.ValidationError):
                continue
            attrs[field.source] = value
        for key, messages in self.together_errors(attrs, set(errors)).items():
            errors.setdefault(key, messages)
        raise serializers.ValidationError(errors)


def query_validated(serializer_class, request, *, left_out: Iterable[str] = ()) -> dict:
    """Validate ``request.query_params`` with ``serializer_class``; a bad value is a 400 through
    the API's one exception handler (dotted field paths). A field that takes one value given more
    than once (``speedup=3&speedup=4``) is a 400 naming it: taking the last one silently would
    answer a question the client did not ask. The keys ``left_out`` are judged as not given (a
    caller that refuses them itself, given empty, with every other problem of the query)."""
    params = request.query_params
    if left_out:
        params = params.copy()
        for key in left_out:
            params.pop(key, None)
    ser = serializer_class(data=params)
    repeated = {
        name: [message] for name, field in ser.fields.items()
        if not isinstance(field, (serializers.ListField, serializers.MultipleChoiceField))
        and (message := given_more_than_once(request.query_params.getlist(name)))
    }
    if repeated:
        raise ValidationError(repeated)
    ser.is_valid(raise_exception=True)
    return ser.validated_data


# Characters a file name must not carry into a header: the C0 and C1 control characters (CR and LF
# would end the header line, and Django refuses a header holding them with BadHeaderError, a 500)
# and the Unicode line and paragraph separators (U+2028, U+2029), which some clients also read as
# line breaks.
CONTROL_CHARACTERS_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def attachment_header(filename: str) -> str:
    """The ``Content-Disposition`` value that downloads a response as ``filename``, built by
    Django's :func:`django.utils.http.content_disposition_header`: ``attachment;
    filename="run-3.json"`` for printable ASCII (a ``"`` or ``\\`` escaped), ``attachment;
    filename*=utf-8''%C3%A9t%C3%A9.jsonl`` (RFC 5987) for any other name. Each character of
    :data:`CONTROL_CHARACTERS_RE` becomes ``_`` first (a name stored before such names were
    refused still downloads), and an empty name becomes ``download``."""
    name = CONTROL_CHARACTERS_RE.sub("_", filename or "") or "download"
    return content_disposition_header(as_attachment=True, filename=name)


def attachment(body: str | bytes, *, content_type: str, filename: str) -> HttpResponse:
    """An HTTP response that downloads ``body`` as ``filename`` (header: :func:`attachment_header`)."""
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = attachment_header(filename)
    return response


#: The formats the API answers in, one or another per route (``?format=`` and the path's suffix):
#: what a route whose key may hold dots (a node's name) reads as a format suffix.
API_FORMATS = frozenset({"json", "csv", "api"})


def format_suffix_into_query(request, suffix: str | None) -> None:
    """Put a path's format ``suffix`` (None for none) into ``request.GET`` (a Django request) as
    ``?format=`` before any given there, every format in lower case
    (:func:`controlplane.api_urls.suffix_as_format_query`)."""
    query_key = api_settings.URL_FORMAT_OVERRIDE
    given = request.GET.getlist(query_key)
    if suffix is not None or any(value != value.lower() for value in given):
        query = request.GET.copy()
        query.setlist(query_key, [value.lower() for value in ([suffix] if suffix is not None else []) + given])
        request.GET = query
