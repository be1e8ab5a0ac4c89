from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class ControlplaneConfig(AppConfig):
    """The ``controlplane`` app: connects the receivers that tell open live sockets to re-check
    their user's authorisation (:mod:`controlplane.signals`) and the one that rebuilds the
    channel layers when their namespace's settings change (:mod:`controlplane.realtime`)."""

    name = "controlplane"

    def ready(self) -> None:
        from django.core.signals import setting_changed

        from controlplane.realtime import namespace_setting_changed
        from controlplane.signals import live_signals_connect

        live_signals_connect()
        setting_changed.connect(namespace_setting_changed, dispatch_uid="ceiling-realtime-namespace")


class CeilingAdminConfig(admin_apps.AdminConfig):
    """Installs :class:`controlplane.admin_site.CeilingAdminSite` as ``admin.site``."""

    default = False  # not the config of the "controlplane" app itself
    default_site = "controlplane.admin_site.CeilingAdminSite"
