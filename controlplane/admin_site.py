"""The admin site: entry by Ceiling role, not by Django's ``is_staff`` flag.

Anyone with a role may open admin; what they can do there follows the role through
:class:`controlplane.backends.RoleBackend` (viewer: view; operator: view + recipes; admin: all).
"""
from django.contrib import admin

from controlplane.permissions import has_role


class CeilingAdminSite(admin.AdminSite):
    site_header = "Ceiling admin"
    site_title = "Ceiling admin"
    index_title = "Recipes, nodes, deployments"

    def has_permission(self, request) -> bool:
        return bool(request.user.is_active and has_role(request.user, "viewer"))
