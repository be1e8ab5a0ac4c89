"""Signal receivers that ask a user's open live sockets to re-check the user's authorisation at
once (:func:`controlplane.consumers.live_user_recheck`), instead of at the sockets' next periodic
check (``CEILING_LIVE_REAUTH_S``). Connected in :meth:`controlplane.apps.ControlplaneConfig.ready`.

They decide nothing: the rule is :func:`controlplane.consumers.live_session_refusal`, run by each
socket. They send one notice per affected user, after the transaction commits (the socket's
check reads the committed rows):

* ``user_logged_out``: the sockets opened with the ending session close with 4401 at once; the
  user's other sessions (other browsers) are re-checked and stay open;
* ``post_save`` of the user model (deactivated, password changed, superuser flag removed), except
  a new user (no socket yet), a fixture load, and a save of ``last_login`` alone (every login
  does one);
* ``post_delete`` of the user model;
* ``m2m_changed`` of the user model's groups: a removal or a clear, from either side
  (``user.groups.remove(group)``, ``group.user_set.clear()``); an addition cannot take a right
  away.

Also here: :func:`user_tokens_revoke` deletes a user's API token when their password changes or
they are deactivated.

A notice that cannot be sent (Redis down) logs a warning and never fails the request that
changed the user. What no signal reports (a session row deleted or expired, a role group renamed
or deleted) is caught by the periodic check.
"""
from __future__ import annotations

from functools import partial

from django.contrib.auth import get_user_model, user_logged_out
from django.contrib.auth.hashers import is_password_usable
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save
from rest_framework.authtoken.models import Token

from controlplane.consumers import live_user_recheck

# Attribute of a group (reverse side) holding its member ids between pre_clear and post_clear.
_CLEARED_IDS = "_ceiling_live_cleared_user_ids"


def _recheck_on_commit(user_ids, *, ended_session_key: str | None = None) -> None:
    for user_id in user_ids:
        transaction.on_commit(partial(live_user_recheck, user_id, ended_session_key=ended_session_key),
                              robust=True)


def user_logged_out_recheck(sender, request, user, **kwargs) -> None:
    """``user_logged_out``: close the sockets of the ending session, re-check the user's others."""
    if user is None or user.pk is None:
        return
    session = getattr(request, "session", None)
    _recheck_on_commit([user.pk], ended_session_key=getattr(session, "session_key", None))


def user_saved_recheck(sender, instance, created, raw=False, update_fields=None, **kwargs) -> None:
    """``post_save`` of a user: re-check their sockets (see the module docstring for the skips)."""
    if created or raw or (update_fields is not None and set(update_fields) == {"last_login"}):
        return
    _recheck_on_commit([instance.pk])


def user_deleted_recheck(sender, instance, **kwargs) -> None:
    """``post_delete`` of a user: their sockets close (the pk is read now; Django clears it later)."""
    _recheck_on_commit([instance.pk])


def user_groups_recheck(sender, instance, action, reverse, pk_set, **kwargs) -> None:
    """``m2m_changed`` of the user's groups: re-check each user who left a group.

    ``reverse`` is False for ``user.groups.<op>`` (``instance`` is the user) and True for
    ``group.user_set.<op>`` (``pk_set`` holds user ids; a clear names none, so the members are
    read at ``pre_clear``)."""
    if action == "pre_clear" and reverse:
        setattr(instance, _CLEARED_IDS, list(instance.user_set.values_list("pk", flat=True)))
    elif action == "post_remove":
        _recheck_on_commit(sorted(pk_set or ()) if reverse else [instance.pk])
    elif action == "post_clear":
        _recheck_on_commit(getattr(instance, _CLEARED_IDS, []) if reverse else [instance.pk])
        if reverse and hasattr(instance, _CLEARED_IDS):
            delattr(instance, _CLEARED_IDS)


def user_tokens_revoke(sender, instance, raw=False, **kwargs) -> None:
    """``pre_save`` of a user: a changed password or a deactivation deletes the user's API
    token (DRF ``authtoken``), in the same transaction as the save, as it ends their other
    sessions; the user asks ``/api/auth/token/`` for a new one. A password change is what
    ``set_password`` records for the save (``_password``, as Django's own ``password_changed``
    reads it): a new hash of the same password, which Django stores at a sign-in when the
    hasher or its iteration count changed (``check_password``'s setter clears ``_password``),
    keeps the token; ``set_unusable_password`` (no ``_password``) revokes it."""
    if raw or instance.pk is None:
        return
    before = type(instance).objects.filter(pk=instance.pk).values_list("password", "is_active").first()
    if before is None:
        return
    password, active = before
    changed = password != instance.password and (getattr(instance, "_password", None) is not None
                                                 or not is_password_usable(instance.password))
    if changed or (active and not instance.is_active):
        Token.objects.filter(user_id=instance.pk).delete()


def live_signals_connect() -> None:
    """Connect the receivers above (idempotent: each has a ``dispatch_uid``)."""
    user_model = get_user_model()
    user_logged_out.connect(user_logged_out_recheck, dispatch_uid="ceiling-live-logout")
    post_save.connect(user_saved_recheck, sender=user_model, dispatch_uid="ceiling-live-user-saved")
    pre_save.connect(user_tokens_revoke, sender=user_model, dispatch_uid="ceiling-user-tokens-revoke")
    post_delete.connect(user_deleted_recheck, sender=user_model, dispatch_uid="ceiling-live-user-deleted")
    groups = getattr(user_model, "groups", None)
    if groups is not None:
        m2m_changed.connect(user_groups_recheck, sender=groups.through, dispatch_uid="ceiling-live-user-groups")
