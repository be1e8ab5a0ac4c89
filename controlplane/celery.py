"""The Celery application.

Broker: Redis at ``REDIS_URL``. Node-bound work (deploy, stop, sampling) is routed to the
queue ``node.<name>`` of the node that owns the processes; control-plane work (sweeps,
reconcile, pruning) goes to the default ``control`` queue. Task state lives in database rows,
never in Celery's result backend.
"""
from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("ceiling")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
