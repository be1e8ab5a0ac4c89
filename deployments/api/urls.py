"""Registers the deployments app's viewsets on the project API router."""


def register(router) -> None:
    """Add this app's routes to ``router`` (a DRF ``DefaultRouter``)."""
