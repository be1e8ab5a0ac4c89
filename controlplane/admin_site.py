"""The admin site: entry by Ceiling role, not by Django's ``is_staff`` flag.

Anyone with a role may open admin; what they can do there follows the role through
:class:`controlplane.backends.RoleBackend` (viewer: view; operator: view + recipes; admin: all).
A refusal there reads as it does on every other page and in the API
(:func:`controlplane.permissions.refusal_message`): ``This needs the admin role; you are a viewer.``
"""
from __future__ import annotations

from functools import wraps
from types import SimpleNamespace

from django.contrib import admin
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import PermissionDenied

from controlplane.backends import RoleBackend
from controlplane.login_throttle import throttled_login
from controlplane.permissions import ROLES, has_role, refusal_message

#: The permission (``add``, ``change``, ``delete``, ``view``) a model admin page asks for, by the
#: last part of its URL name (``auth_user_changelist``); a POST to a page that only shows changes.
_PAGE_ACTIONS = {"add": "add", "change": "change", "delete": "delete", "simple_history": "change"}


class CeilingAdminSite(admin.AdminSite):
    site_header = "Ceiling admin"
    site_title = "Ceiling admin"
    index_title = "Recipes, nodes, deployments"
    # Django's admin form also demands is_staff; here the role decides (has_permission).
    login_form = AuthenticationForm

    def has_permission(self, request) -> bool:
        return bool(request.user.is_active and has_role(request.user, "viewer"))

    def admin_view(self, view, cacheable=False):
        """Django's wrapper of every admin page, with a refusal that names the role needed and the
        user's own: Django's model pages raise a bare ``PermissionDenied``, which would render
        the 403 page without a reason."""
        inner = super().admin_view(view, cacheable)

        @wraps(view)
        def refusing_by_role(request, *args, **kwargs):
            try:
                return inner(request, *args, **kwargs)
            except PermissionDenied as exc:
                if str(exc):
                    raise
                raise PermissionDenied(refusal_message(request.user, self.role_needed(request))) from exc

        return refusing_by_role

    def role_needed(self, request) -> str:
        """The least role that may do what ``request`` asks of a model page (by
        :class:`controlplane.backends.RoleBackend`'s rule), ``admin`` when none is found."""
        url_name = getattr(request.resolver_match, "url_name", "") or ""
        for model in self._registry:
            prefix = f"{model._meta.app_label}_{model._meta.model_name}_"
            if not url_name.startswith(prefix):
                continue
            page = url_name[len(prefix):]
            action = _PAGE_ACTIONS.get(page, "view" if request.method in ("GET", "HEAD") else "change")
            perm = f"{model._meta.app_label}.{action}_{model._meta.model_name}"
            for role in ROLES:
                probe = SimpleNamespace(is_authenticated=True, is_active=True, is_superuser=False, _ceiling_role=role)
                if RoleBackend().has_perm(probe, perm):
                    return role
        return "admin"

    def login(self, request, extra_context=None):
        """Django's admin login, with failed sign-ins limited per address
        (:mod:`controlplane.login_throttle`)."""
        return throttled_login(super().login)(request, extra_context)
