from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "deployments"
    verbose_name = "Deployments"

    def ready(self) -> None:
        from deployments import signals

        signals.connect()
