"""The Celery application.

Broker: Redis at ``REDIS_URL``. Node-bound work (deploy, stop, sampling) is routed to the
queue ``node.<name>`` of the node that owns the processes; control-plane work (sweeps,
reconcile, pruning) goes to the default ``control`` queue. Task state lives in database rows,
never in Celery's result backend.

Installations sharing one Redis database (two people's ``make demo`` on one host with the default
``REDIS_URL``) must not take each other's tasks: every installation names its node ``local`` and
its control queue ``control``, so an agent would run a stop or a deploy of another installation's
database on its own engines. Every broker key therefore starts with this installation's namespace,
the one its live data already uses (:func:`controlplane.realtime.realtime_namespace`:
``CEILING_REALTIME_PREFIX``, or a hash of the database identity), through kombu's Redis
``global_keyprefix`` (:func:`broker_key_prefix`). Every process of one installation (web, control
worker, beat, node agents on any host) reads the same database, so they share the namespace.
"""
from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")


def broker_key_prefix() -> str:
    """The prefix of every broker key of this installation: ``ceiling:<namespace>:`` (e.g.
    ``ceiling:db-5420b10f0365:``, so its queue ``node.local`` is the Redis list
    ``ceiling:db-5420b10f0365:node.local``). Read when a broker connection is made, from the live
    database connection, as :func:`controlplane.realtime.realtime_namespace` is."""
    from controlplane.realtime import realtime_namespace

    return f"ceiling:{realtime_namespace()}:"


class NamespacedCelery(Celery):
    """A Celery app whose broker connections carry :func:`broker_key_prefix` as the Redis
    transport's ``global_keyprefix`` (set explicitly in ``CELERY_BROKER_TRANSPORT_OPTIONS``, it
    is kept).

    The connection and producer pools a process keeps are those of the namespace they were made
    in; when the namespace changes (a test run switching to its test database after a first
    publish, a test naming another installation), they are dropped before the next publish, so
    a message never goes out under a namespace that is no longer this process's."""

    _pool_prefix: str | None = None

    def _connection(self, url, *args, transport_options=None, **kwargs):
        options = dict(transport_options or {})
        if "global_keyprefix" not in self.conf.broker_transport_options:
            options.setdefault("global_keyprefix", broker_key_prefix())
        return super()._connection(url, *args, transport_options=options, **kwargs)

    def _drop_pools_of_another_namespace(self) -> None:
        prefix = broker_key_prefix()
        if prefix != self._pool_prefix:
            # kombu keys its pools by the connection's options, the prefix among them: the next
            # acquire makes (or finds) the pools of this prefix
            self._pool = None
            amqp = self.__dict__.get("amqp")
            if amqp is not None:
                amqp._producer_pool = None
            self._pool_prefix = prefix

    def send_task(self, *args, **kwargs):
        self._drop_pools_of_another_namespace()
        return super().send_task(*args, **kwargs)

    def producer_or_acquire(self, producer=None):
        if producer is None:
            self._drop_pools_of_another_namespace()
        return super().producer_or_acquire(producer)

    def connection_or_acquire(self, connection=None, pool=True, *args, **kwargs):
        if connection is None:
            self._drop_pools_of_another_namespace()
        return super().connection_or_acquire(connection, pool, *args, **kwargs)


app = NamespacedCelery("ceiling")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
