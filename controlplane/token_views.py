"""Obtain an API token with a username and password.

``POST /api/auth/token/`` with ``{"username": ..., "password": ...}`` → ``{"token": ...}``.
The same user always gets the same token (DRF's ``authtoken`` keeps one per user); deleting it
in admin revokes it. Wrong credentials → 400 with a message, never a hint which part was wrong.
"""
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.permissions import AllowAny
from rest_framework.throttling import AnonRateThrottle


class TokenThrottle(AnonRateThrottle):
    """At most 20 attempts a minute per client address (password guessing)."""

    rate = "20/min"


class TokenObtainView(ObtainAuthToken):
    permission_classes = [AllowAny]
    authentication_classes: list = []
    throttle_classes = [TokenThrottle]

    @extend_schema(
        request=inline_serializer("TokenRequest", {"username": serializers.CharField(), "password": serializers.CharField()}),
        responses=inline_serializer("TokenResponse", {"token": serializers.CharField()}),
        description="Exchange a username and password for the user's API token "
        "(send it as `Authorization: Token <token>` or `Bearer <token>`).",
    )
    def post(self, request, *args, **kwargs):
        return super().post(request, *args, **kwargs)
