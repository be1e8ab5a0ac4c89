from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class ControlplaneConfig(AppConfig):
    """The ``controlplane`` app: connects the receivers that tell open live sockets to re-check
    their user's authorisation (:mod:`controlplane.signals`)."""

    name = "controlplane"

    def ready(self) -> None:
        from controlplane.signals import live_signals_connect

        live_signals_connect()


class CeilingAdminConfig(admin_apps.AdminConfig):
    """Installs :class:`controlplane.admin_site.CeilingAdminSite` as ``admin.site``."""

    default = False  # not the config of the "controlplane" app itself
    default_site = "controlplane.admin_site.CeilingAdminSite"
