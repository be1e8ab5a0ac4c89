"""Top-level URL map: pages, the REST API under /api/, OpenAPI schema and docs, admin.

The schema and the docs need the viewer role like every other read: the schema answers 401
without credentials, the docs send an anonymous visitor to the login page, and both answer 403
to a signed-in user in no role group. A refusal from the schema is JSON, whatever schema format
was asked for: rendered as an OpenAPI document, a browser would save it as a file instead of
showing why; so is its answer to OPTIONS (the endpoint's name, description and formats, as every
other API endpoint answers it), which is no OpenAPI document either. The docs page takes GET and
HEAD; OPTIONS names them (200, ``Allow: GET, HEAD, OPTIONS``, no body), and any other method is 405.
"""
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpResponse
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.renderers import JSONRenderer

from controlplane.api_urls import with_format_suffix

from controlplane import views
from controlplane.login_throttle import throttled_login
from controlplane.drf_defaults import SingleValuedQuery
from controlplane.permissions import RolePermission
from controlplane.token_views import TokenObtainView
from deployments.views.common import role_page



class SchemaView(SpectacularAPIView):
    """The OpenAPI 3 schema of this API: YAML, or JSON with ?format=json or at /api/schema.json."""

    # Errors and the answer to OPTIONS are JSON (see the module docstring).
    def _as_json(self) -> None:
        self.request.accepted_renderer = JSONRenderer()
        self.request.accepted_media_type = JSONRenderer.media_type

    def handle_exception(self, exc):
        response = super().handle_exception(exc)
        self._as_json()
        return response

    def options(self, request, *args, **kwargs):
        response = super().options(request, *args, **kwargs)
        self._as_json()
        return response


class DocsView(SpectacularSwaggerView):
    """The Swagger UI page of the schema. Its one renderer is the page's template, which has nothing
    to show for REST framework's OPTIONS metadata, so OPTIONS answers with the methods alone."""

    http_method_names = ["get", "head", "options"]

    def options(self, request, *args, **kwargs):
        return HttpResponse(status=200, content_type="text/plain; charset=utf-8")  # Allow: set by finalize_response


handler400 = "controlplane.views.bad_request"
handler404 = "controlplane.notfound_views.page_not_found"

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", throttled_login(auth_views.LoginView.as_view(template_name="registration/login.html")),
         name="login"),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    *with_format_suffix([
        path("api/schema/", SchemaView.as_view(permission_classes=[RolePermission, SingleValuedQuery]), name="api-schema"),
        path("api/auth/token/", TokenObtainView.as_view(), name="api-token"),
    ]),
    path(
        "api/docs/",
        role_page(read="viewer")(DocsView.as_view(url_name="api-schema", permission_classes=[RolePermission])),
        name="api-docs",
    ),
    path("api/", include("controlplane.api_urls")),
    path("", include("deployments.urls")),
    path("", include("benchmarks.urls")),
    path("", include("kernels.urls")),
]
