"""REST API router: every app registers its viewsets here."""
from rest_framework.routers import DefaultRouter

from deployments.api.urls import register as register_deployments

router = DefaultRouter()
register_deployments(router)

urlpatterns = router.urls
