"""Registers the benchmarks app's viewsets on the project API router."""
from benchmarks.api import views


def register(router) -> None:
    """Add ``sweeps`` (with ``cancel``, ``analysis``, ``export``) and ``runs`` (with ``records``,
    ``export``, ``original``, ``import``, ``compare``) to ``router`` (a DRF ``DefaultRouter``)."""
    router.register("sweeps", views.SweepViewSet, basename="sweep")
    router.register("runs", views.RunViewSet, basename="run")
