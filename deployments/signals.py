"""Signal handlers of the deployments app: a secret's earlier value is kept as a
:class:`~deployments.models.RetiredSecretValue` when the secret is changed or deleted, so that
redaction still masks it in logs written while it was in use (see :mod:`controlplane.redaction`).

The earlier value is copied as stored (sealed, :mod:`controlplane.secretbox`), so retiring needs
no key; only deciding whether a value changed compares plaintexts, through
:func:`controlplane.secretbox.secret_plaintext`.

A node row that is created or deleted, by whatever path (an agent's registration, ``manage.py
seed``, the admin, the API's delete), is announced on the nodes' roster group once the
transaction commits (:func:`deployments.telemetry.events.node_roster_broadcast`), so the wall
redraws its tiles at once."""
from __future__ import annotations

from django.db.models.signals import post_delete, post_save, pre_save

from controlplane.secretbox import SealedValue, SecretUnreadable, secret_plaintext


def _retire_changed_value(sender, instance, raw=False, **kwargs) -> None:
    from deployments.models import RetiredSecretValue

    if raw or instance.pk is None:
        return
    old = type(instance)._default_manager.filter(pk=instance.pk).values_list("value", flat=True).first()
    if not old or (isinstance(instance.value, SealedValue) and instance.value == old):
        return  # no earlier value, or the value is the one read from the row (e.g. a description edit)
    try:
        old_text = secret_plaintext(old, name=instance.name)
    except SecretUnreadable:
        # A value this process cannot open is kept all the same: one with the right key masks it.
        RetiredSecretValue.objects.create(name=instance.name, value=old)
        return
    try:
        changed = old_text != secret_plaintext(instance.value, name=instance.name)
    except SecretUnreadable:
        changed = True
    if old_text and changed:
        RetiredSecretValue.objects.create(name=instance.name, value=old)


def _retire_deleted_value(sender, instance, **kwargs) -> None:
    from deployments.models import RetiredSecretValue

    if instance.value:
        RetiredSecretValue.objects.create(name=instance.name, value=instance.value)


def _announce_node_registered(sender, instance, created=False, raw=False, **kwargs) -> None:
    from deployments.telemetry.events import node_roster_broadcast

    if created and not raw:
        node_roster_broadcast(node_name=instance.name, event="registered")


def _announce_node_removed(sender, instance, **kwargs) -> None:
    from deployments.telemetry.events import node_roster_broadcast

    node_roster_broadcast(node_name=instance.name, event="removed")


def connect() -> None:
    """Connect the handlers (called once from :meth:`DeploymentsConfig.ready`)."""
    pre_save.connect(_retire_changed_value, sender="deployments.Secret", dispatch_uid="deployments.secret.retire-changed")
    post_delete.connect(_retire_deleted_value, sender="deployments.Secret",
                        dispatch_uid="deployments.secret.retire-deleted")
    post_save.connect(_announce_node_registered, sender="deployments.Node", dispatch_uid="deployments.node.roster-registered")
    post_delete.connect(_announce_node_removed, sender="deployments.Node", dispatch_uid="deployments.node.roster-removed")
