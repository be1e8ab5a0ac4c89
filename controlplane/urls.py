"""Top-level URL map: pages, the REST API under /api/, OpenAPI schema and docs, admin."""
from django.contrib import admin
from django.contrib.auth.decorators import login_required
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from controlplane import views
from controlplane.token_views import TokenObtainView

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", auth_views.LoginView.as_view(template_name="registration/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", login_required(SpectacularSwaggerView.as_view(url_name="api-schema")), name="api-docs"),
    path("api/auth/token/", TokenObtainView.as_view(), name="api-token"),
    path("api/", include("controlplane.api_urls")),
    path("", include("deployments.urls")),
    path("", include("benchmarks.urls")),
    path("", include("kernels.urls")),
]
