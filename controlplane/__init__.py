"""Ceiling control plane project package: settings, URLs, ASGI app and the Celery app."""
from .celery import app as celery_app

__all__ = ("celery_app",)
