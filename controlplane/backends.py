"""Model permissions derived from Ceiling roles (used by Django admin).

* ``admin``: every permission (users, tokens, secrets included);
* ``operator``: view the product's own models, add/change recipes;
* ``viewer``: view the product's own models except secrets.

Users, groups and API tokens belong to ``auth``/``authtoken`` and are visible to admins only:
a token is a credential, so letting a viewer list tokens would let a viewer act as anyone.
Object-free (``obj`` is ignored): roles are global in this version.
"""
from __future__ import annotations

from django.contrib.auth.backends import BaseBackend

from controlplane.permissions import user_role

PRODUCT_APPS = frozenset({"deployments", "benchmarks", "kernels"})
_HIDDEN_FROM_NON_ADMINS = frozenset({"deployments.view_secret"})
_OPERATOR_EXTRA = frozenset({"deployments.add_recipe", "deployments.change_recipe"})


class RoleBackend(BaseBackend):
    """Grant Django model permissions from the user's role; authentication is left to ModelBackend."""

    def has_perm(self, user_obj, perm: str, obj=None) -> bool:
        role = user_role(user_obj)
        if role is None or not user_obj.is_active:
            return False
        if role == "admin":
            return True
        app_label, _, codename = perm.partition(".")
        if app_label not in PRODUCT_APPS or perm in _HIDDEN_FROM_NON_ADMINS:
            return False
        if codename.startswith("view_"):
            return True
        return role == "operator" and perm in _OPERATOR_EXTRA

    def has_module_perms(self, user_obj, app_label: str) -> bool:
        role = user_role(user_obj)
        if role is None or not user_obj.is_active:
            return False
        return role == "admin" or app_label in PRODUCT_APPS
