"""REST API router: every app registers its viewsets here. The last route answers every other
path under ``/api/`` with a JSON 404 (:class:`controlplane.notfound_views.ApiNotFoundView`)."""
from django.urls import re_path
from rest_framework.routers import DefaultRouter

from benchmarks.api.urls import register as register_benchmarks
from controlplane.notfound_views import ApiNotFoundView
from deployments.api.urls import register as register_deployments
from kernels.api.urls import register as register_kernels

router = DefaultRouter()
register_deployments(router)
register_benchmarks(router)
register_kernels(router)

urlpatterns = router.urls + [
    re_path(r"^.*$", ApiNotFoundView.as_view(), name="api-not-found"),
]
