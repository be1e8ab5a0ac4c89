"""Websocket URL routes: the one live-data socket (``ws/live/``, :class:`controlplane.consumers.LiveConsumer`).

Every other path is refused by the router. Origin checking and session authentication wrap
these routes in :mod:`controlplane.asgi`.
"""
from django.urls import path

from controlplane.consumers import LiveConsumer

websocket_urlpatterns: list = [
    path("ws/live/", LiveConsumer.as_asgi(), name="ws-live"),
]
