"""Model permissions derived from Ceiling roles (used by Django admin).

* ``admin``: every permission;
* ``operator``: view everything, add/change recipes;
* ``viewer``: view everything except secrets.

Object-free (``obj`` is ignored): roles are global in this version.
"""
from __future__ import annotations

from django.contrib.auth.backends import BaseBackend

from controlplane.permissions import user_role

_OPERATOR_EXTRA = {"deployments.add_recipe", "deployments.change_recipe"}


class RoleBackend(BaseBackend):
    """Grant Django model permissions from the user's role; authentication is left to ModelBackend."""

    def has_perm(self, user_obj, perm: str, obj=None) -> bool:
        role = user_role(user_obj)
        if role is None or not user_obj.is_active:
            return False
        if role == "admin":
            return True
        app_label, _, codename = perm.partition(".")
        if codename.startswith("view_"):
            return codename != "view_secret"
        return role == "operator" and perm in _OPERATOR_EXTRA

    def has_module_perms(self, user_obj, app_label: str) -> bool:
        return user_role(user_obj) is not None and user_obj.is_active
