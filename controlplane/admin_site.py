"""The admin site: entry by Ceiling role, not by Django's ``is_staff`` flag.

Anyone with a role may open admin; what they can do there follows the role through
:class:`controlplane.backends.RoleBackend` (viewer: view; operator: view + recipes; admin: all).
"""
from django.contrib import admin
from django.contrib.auth.forms import AuthenticationForm

from controlplane.login_throttle import throttled_login
from controlplane.permissions import has_role


class CeilingAdminSite(admin.AdminSite):
    site_header = "Ceiling admin"
    site_title = "Ceiling admin"
    index_title = "Recipes, nodes, deployments"
    # Django's admin form also demands is_staff; here the role decides (has_permission).
    login_form = AuthenticationForm

    def has_permission(self, request) -> bool:
        return bool(request.user.is_active and has_role(request.user, "viewer"))

    def login(self, request, extra_context=None):
        """Django's admin login, with failed sign-ins limited per address
        (:mod:`controlplane.login_throttle`)."""
        return throttled_login(super().login)(request, extra_context)
