"""ASGI entry point: HTTP through Django, websockets through Channels.

A websocket passes three gates before any consumer code runs: ``SameOriginValidator``
refuses an ``Origin`` header that is missing or whose scheme, host and port differ from the
request's own (``Host`` header), unless listed in ``CEILING_WS_ALLOWED_ORIGINS`` (a page of
another site or another port cannot open a socket with the user's cookie), ``AuthMiddlewareStack`` resolves the session
cookie to ``scope["user"]``, and the URL router refuses every path but those of
:mod:`controlplane.routing`. The consumer itself then checks the user's role and each
subscription before accepting (:mod:`controlplane.consumers`).

Importing this module also gives daphne the reason phrases Twisted lacks (``429 Too Many
Requests`` rather than ``429 Unknown Status``: :mod:`controlplane.reason_phrases`), and leaves
a form body for Django to read rather than Twisted (:mod:`controlplane.daphne_bodies`), and
sends daphne's access lines through the ``daphne.access`` logger, secret values masked
(:mod:`controlplane.access_log`).
"""
from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from controlplane.access_log import access_log_through_logging  # noqa: E402
from controlplane.consumers import SameOriginValidator  # noqa: E402
from controlplane.daphne_bodies import twisted_form_parsing_off  # noqa: E402
from controlplane.reason_phrases import reason_phrases_fill  # noqa: E402
from controlplane.routing import websocket_urlpatterns  # noqa: E402

reason_phrases_fill()
twisted_form_parsing_off()
access_log_through_logging()

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
