"""Registers the kernels app's viewsets on the project API router."""
from kernels.api import views


def register(router) -> None:
    """Add ``kernel-packages`` (by name), ``kernel-jobs`` (with ``cancel``, ``variants``, ``chart``,
    ``best``, ``export``), ``kernel-best`` (with ``config``) and ``kernel-whatif`` to ``router``
    (a DRF ``DefaultRouter``)."""
    router.register("kernel-packages", views.PackageViewSet, basename="kernel-package")
    router.register("kernel-jobs", views.JobViewSet, basename="kernel-job")
    router.register("kernel-best", views.BestViewSet, basename="kernel-best")
    router.register("kernel-whatif", views.WhatIfViewSet, basename="kernel-whatif")
