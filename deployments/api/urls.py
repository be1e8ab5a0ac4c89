"""Registers the deployments app's viewsets on the project API router."""
from deployments.api import views


def register(router) -> None:
    """Add this app's routes to ``router`` (a DRF ``DefaultRouter``): ``nodes``, ``recipes``
    (with ``versions``, ``versions/<n>``, ``diff``, ``revert``, ``dry-run``), ``secrets``,
    ``deployments`` (with ``stop``, ``cancel``, ``events``, ``telemetry``) and ``processes``
    (with ``log`` and ``log/download``)."""
    router.register("nodes", views.NodeViewSet, basename="node")
    router.register("recipes", views.RecipeViewSet, basename="recipe")
    router.register("secrets", views.SecretViewSet, basename="secret")
    router.register("deployments", views.DeploymentViewSet, basename="deployment")
    router.register("processes", views.ServerProcessViewSet, basename="process")
