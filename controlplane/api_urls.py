"""REST API router: every app registers its viewsets here."""
from rest_framework.routers import DefaultRouter

from benchmarks.api.urls import register as register_benchmarks
from deployments.api.urls import register as register_deployments
from kernels.api.urls import register as register_kernels

router = DefaultRouter()
register_deployments(router)
register_benchmarks(router)
register_kernels(router)

urlpatterns = router.urls
