"""Websocket URL routes (filled by the live-telemetry work; empty routes refuse every socket)."""
websocket_urlpatterns: list = []
