"""REST API router: every app registers its viewsets here."""
from rest_framework.routers import DefaultRouter

from benchmarks.api.urls import register as register_benchmarks
from deployments.api.urls import register as register_deployments

router = DefaultRouter()
register_deployments(router)
register_benchmarks(router)

urlpatterns = router.urls
