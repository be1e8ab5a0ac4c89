"""Signal handlers of the deployments app: a secret's earlier value is kept as a
:class:`~deployments.models.RetiredSecretValue` when the secret is changed or deleted, so that
redaction still masks it in logs written while it was in use (see :mod:`controlplane.redaction`)."""
from __future__ import annotations

from django.db.models.signals import post_delete, pre_save


def _retire_changed_value(sender, instance, raw=False, **kwargs) -> None:
    from deployments.models import RetiredSecretValue

    if raw or instance.pk is None:
        return
    old = type(instance)._default_manager.filter(pk=instance.pk).values_list("value", flat=True).first()
    if old and old != instance.value:
        RetiredSecretValue.objects.create(name=instance.name, value=old)


def _retire_deleted_value(sender, instance, **kwargs) -> None:
    from deployments.models import RetiredSecretValue

    if instance.value:
        RetiredSecretValue.objects.create(name=instance.name, value=instance.value)


def connect() -> None:
    """Connect the handlers (called once from :meth:`DeploymentsConfig.ready`)."""
    pre_save.connect(_retire_changed_value, sender="deployments.Secret", dispatch_uid="deployments.secret.retire-changed")
    post_delete.connect(_retire_deleted_value, sender="deployments.Secret",
                        dispatch_uid="deployments.secret.retire-deleted")
