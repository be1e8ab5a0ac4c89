"""API authentication: DRF tokens sent as ``Authorization: Token <key>`` or ``Bearer <key>``."""
from rest_framework.authentication import TokenAuthentication


class BearerOrTokenAuthentication(TokenAuthentication):
    """Token authentication that also accepts the ``Bearer`` keyword used by most HTTP tools."""

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if header[:7].lower() == "bearer ":
            request.META["HTTP_AUTHORIZATION"] = "Token " + header[7:]
        return super().authenticate(request)
