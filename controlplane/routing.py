"""Websocket URL routes: the one live-data socket (``ws/live/``, :class:`controlplane.consumers.LiveConsumer`).

Every other path goes to :class:`controlplane.consumers.UnknownPathConsumer`, which refuses
the handshake (no routing error, no traceback). Origin checking and session authentication wrap
these routes in :mod:`controlplane.asgi`.
"""
from django.urls import path, re_path

from controlplane.consumers import LiveConsumer, UnknownPathConsumer

websocket_urlpatterns: list = [
    path("ws/live/", LiveConsumer.as_asgi(), name="ws-live"),
    re_path(r"", UnknownPathConsumer.as_asgi(), name="ws-unknown"),
]
