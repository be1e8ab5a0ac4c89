"""Obtain an API token with a username and password.

``POST /api/auth/token/`` with ``{"username": ..., "password": ...}`` → ``{"token": ...}``.
The same user always gets the same token (DRF's ``authtoken`` keeps one per user); deleting it
in admin revokes it. Wrong credentials → 400 ``{"non_field_errors": ["Unable to log in with
provided credentials."]}``, never a hint which part was wrong; a missing field, another key, a
field given twice or a value that is not a string → 400 naming it and what was sent, every
problem at once (``{"username": ["must be a string, got the number 5"]}``). No message quotes
the password: one that is not a string is named by its type alone (``must be a string, got a
number``), one given twice by the count (``is given 2 times: give it once``).
More than 20 attempts a minute from one address → 429.
Right credentials of a user in no role group → 403 ``{"detail": ..., "code": "no_role"}`` and
no token is created (such a token would be refused everywhere).
"""
import re
from collections.abc import Mapping

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.authtoken.models import Token
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.throttling import AnonRateThrottle

from controlplane.api import (
    DetailSerializer,
    ValidationErrorSerializer,
    repeated_key_errors,
    request_body,
    shown_type,
    shown_value,
    unknown_field_errors,
    unknown_query_errors,
)
from controlplane.jsonsafe import json_spelled
from controlplane.permissions import user_role


class TokenThrottle(AnonRateThrottle):
    """At most 20 attempts a minute per client address (password guessing). The address is
    ``REMOTE_ADDR`` unless ``CEILING_NUM_PROXIES`` says how many proxies in front of Ceiling
    append to ``X-Forwarded-For`` (DRF's ``NUM_PROXIES``), so a client cannot name its own."""

    scope = "token"
    rate = "20/min"


# A surrogate code point: a JSON string can carry one ("\ud800"), UTF-8 cannot encode it.
_SURROGATE_RE = re.compile(r"[\ud800-\udfff]")


class TokenObtainView(ObtainAuthToken):
    # ObtainAuthToken names DRF's stock parsers; the project's (size limit, nesting depth,
    # non-finite numbers) apply here as on every other endpoint.
    parser_classes = api_settings.DEFAULT_PARSER_CLASSES
    permission_classes = [AllowAny]
    authentication_classes: list = []
    throttle_classes = [TokenThrottle]

    @extend_schema(
        request=inline_serializer("TokenRequest", {"username": serializers.CharField(), "password": serializers.CharField()}),
        responses={
            200: inline_serializer("TokenResponse", {"token": serializers.CharField()}),
            400: OpenApiResponse(ValidationErrorSerializer, description=(
                'Wrong username or password (the same answer for either): {"non_field_errors": '
                '["Unable to log in with provided credentials."]}; a field left out or blank: '
                '{"password": ["This field is required."]}; a value that is not a string: {"username": '
                '["must be a string, got the number 5"]} (a password by its type alone: "got a number"); a query '
                'key other than format: {"x": ["unknown field \'x\'; allowed: format"]}.')),
            403: inline_serializer("TokenNoRole", {"detail": serializers.CharField(), "code": serializers.CharField()}),
            429: OpenApiResponse(DetailSerializer, description=(
                'More than 20 attempts a minute from this address: {"detail": "Request was throttled. '
                'Expected available in N seconds."}; the Retry-After header gives the seconds.')),
        },
        description="Exchange a username and password for the user's API token "
        "(send it as `Authorization: Token <token>` or `Bearer <token>`). "
        "Wrong credentials get 400 (`non_field_errors`), never saying which part was wrong. "
        "A user in no role group (viewer, operator, admin) gets 403 and no token.",
    )
    def post(self, request, *args, **kwargs):
        # The body is {"username", "password"}, both text: another key is refused at its name and a
        # number or boolean is not taken as the text it would print as (DRF's CharField would).
        # A key or form field given twice, a number not finite: named with the rest, in the words
        # of every endpoint (request_body), a password given twice by its count alone.
        data, found = request_body(request)
        errors = unknown_field_errors(data, ["username", "password"])
        # A query key is refused as on every other write (KnownQueryKeys: format alone), by its
        # name only: a password put in the query is never quoted back.
        for key, messages in unknown_query_errors(request, self).items():
            errors.setdefault(key, []).extend(messages)
        # Of the password only how often it is given and its type are named, never its text (nor
        # a number of it that is not finite, nor a key given twice inside it with its values).
        errors.update({path: messages for path, messages in found.items()
                       if path != "password" and not path.startswith("password.")})
        errors.update({path: messages for path, messages in repeated_key_errors(data).items() if path == "password"})
        for name in ("username", "password"):
            if name in errors or not isinstance(data, Mapping) or name not in data:
                continue
            value = data[name]   # given once: a field given twice is named above
            if not isinstance(value, str):
                shown = shown_value(value) if name == "username" else shown_type(value)
                errors[name] = [f"must be a string, got {shown}"]
            elif name == "password" and _SURROGATE_RE.search(value):
                # DRF's CharField would name the code point, a character of the password
                errors[name] = ["Surrogate characters are not allowed."]
        if errors:
            raise ValidationError(errors)
        serializer = self.get_serializer(data=data)
        serializer.is_valid(raise_exception=True)
        user = serializer.validated_data["user"]
        if user_role(user) is None:
            return Response(
                {"detail": f"User {json_spelled(user.get_username(), 160)} has no role: ask an admin to add them to "
                 "the viewer, operator or admin group.", "code": "no_role"},
                status=status.HTTP_403_FORBIDDEN,
            )
        token, _ = Token.objects.get_or_create(user=user)
        return Response({"token": token.key})
