"""Template context shared by every page."""
from django.conf import settings


def ceiling(request):
    """Expose the product version and the requesting user's role to templates."""
    from controlplane.permissions import user_role

    user = getattr(request, "user", None)
    return {
        "ceiling_version": settings.CEILING_VERSION,
        "ceiling_role": user_role(user) if user is not None else None,
    }
