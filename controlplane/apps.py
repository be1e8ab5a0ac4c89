from django.contrib.admin import apps as admin_apps


class CeilingAdminConfig(admin_apps.AdminConfig):
    """Installs :class:`controlplane.admin_site.CeilingAdminSite` as ``admin.site``."""

    default = False  # not the config of the "controlplane" app itself
    default_site = "controlplane.admin_site.CeilingAdminSite"
