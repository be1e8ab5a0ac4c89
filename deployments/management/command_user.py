"""The ``--user USERNAME`` of the management commands that create records an API user would
otherwise own (``manage.py sweep``, ``manage.py kernel_job``, ``manage.py kernel_job_ingest --new``,
``manage.py import_results``):
the user is recorded as the record's ``created_by``, as the API records the signed-in user.

A command acts with the database's full rights, so ``--user`` is held to what the API would
require of that user for the same record: the user must exist, be active and have the role
(:mod:`controlplane.permissions`) the API's create needs. Without ``--user`` the record has no
creator, and the pages say it came from the command line. A ``--user`` refused for any of these
exits with status 2 on one line, as every other refusal of a command's input does.
"""
from __future__ import annotations

from django.contrib.auth import get_user_model

from controlplane.commands import refused
from controlplane.jsonsafe import json_spelled
from controlplane.permissions import ROLE_ORDER, has_role, user_role


def command_user(username: str | None, *, role: str, what: str):
    """The active user named ``username`` who holds at least ``role`` (``viewer``, ``operator`` or
    ``admin``), to record as the creator of ``what`` (e.g. ``"a sweep"``); None when ``username``
    is None (no ``--user`` given).

    Raises ``CommandError`` with one line naming the user and what is missing, exit status 2
    (:func:`controlplane.commands.refused`, input the command refuses): no such user, an inactive
    user, or a role below ``role`` (``--user 'vera': has the viewer role; creating a sweep needs
    operator or admin``).
    """
    if username is None:
        return None
    if role not in ROLE_ORDER:
        raise ValueError(f"role must be one of {', '.join(ROLE_ORDER)}, got {role!r}")
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise refused(f"--user {json_spelled(username, 160)}: no such user")
    if not user.is_active:
        raise refused(f"--user {json_spelled(username, 160)}: the user is inactive; creating {what} needs an active user")
    if not has_role(user, role):
        enough = " or ".join(name for name, rank in ROLE_ORDER.items() if rank >= ROLE_ORDER[role])
        held = user_role(user)
        has = f"has the {held} role" if held else f"has no role (is in none of the groups {', '.join(ROLE_ORDER)})"
        raise refused(f"--user {json_spelled(username, 160)}: {has}; creating {what} needs {enough}")
    return user
