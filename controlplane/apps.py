from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class ControlplaneConfig(AppConfig):
    """The ``controlplane`` app: connects the receivers that tell open live sockets to re-check
    their user's authorisation (:mod:`controlplane.signals`), and the one that keeps the
    installation's identity row (:class:`controlplane.models.Installation`) after a migrate or a
    flush."""

    name = "controlplane"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from controlplane.realtime import installation_after_migrate
        from controlplane.signals import live_signals_connect

        live_signals_connect()
        # After migrate and after flush (which empties the table): the installation row exists.
        post_migrate.connect(installation_after_migrate, sender=self,
                             dispatch_uid="controlplane-installation-after-migrate")


class CeilingAdminConfig(admin_apps.AdminConfig):
    """Installs :class:`controlplane.admin_site.CeilingAdminSite` as ``admin.site``."""

    default = False  # not the config of the "controlplane" app itself
    default_site = "controlplane.admin_site.CeilingAdminSite"
