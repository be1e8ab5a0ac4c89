"""The JSON 404 of every path under ``/api/`` that no route matches.

The last route of :mod:`controlplane.api_urls` sends any other path under ``/api/`` here, so an
unknown endpoint (``/api/nothing/``), a lookup its route's pattern refuses
(``/api/kernel-packages/NOPE/``) or a version number too long for its pattern
(``/api/recipes/3/versions/99999999999999999999999/``) is ``404 {"detail": ...}`` in JSON like
every other API error, whatever ``DEBUG`` is, instead of Django's HTML page.
"""
from django.conf import settings
from django.http import HttpResponsePermanentRedirect
from django.urls import is_valid_path
from rest_framework.exceptions import NotFound
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView


class ApiNotFoundView(APIView):
    """``404 {"detail": "no API endpoint at <path>"}`` for any method, in JSON whatever the
    client accepts.

    Authentication and roles apply first, as for a read of an unknown object
    (``/api/runs/9999/``): no credentials → 401, a signed-in user in no role group → 403, so an
    anonymous client learns nothing about which paths exist. Every method needs only ``viewer``:
    a write to a path that is no endpoint is a 404, not a 403.

    A catch-all route switches off Django's ``APPEND_SLASH`` under ``/api/`` (every path now
    matches a route), so this view keeps it: a GET or HEAD of ``/api/recipes`` is redirected to
    ``/api/recipes/`` as before; any other method gets the 404 naming the path with the slash,
    because a redirect would lose its body.
    """

    schema = None  # not an endpoint of the OpenAPI schema
    renderer_classes = [JSONRenderer]
    read_role = "viewer"
    write_role = "viewer"
    slashed_endpoint = False

    def dispatch(self, request, *args, **kwargs):
        self.slashed_endpoint = _is_endpoint_with_slash(request)
        if self.slashed_endpoint and request.method in ("GET", "HEAD"):
            return HttpResponsePermanentRedirect(request.get_full_path(force_append_slash=True))
        return super().dispatch(request, *args, **kwargs)

    def perform_content_negotiation(self, request, force=False):
        # JSON even for a client that accepts only text/html (a 406 would hide the 404).
        return super().perform_content_negotiation(request, force=True)

    def initial(self, request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)  # authentication and the role check
        hint = f"; the endpoint is {request.path}/ (with a trailing slash)" if self.slashed_endpoint else ""
        raise NotFound(f"no API endpoint at {request.path}{hint}")


def _is_endpoint_with_slash(request) -> bool:
    """True when ``settings.APPEND_SLASH`` is on, ``request``'s path has no trailing slash and,
    with one, names a route other than :class:`ApiNotFoundView`."""
    path = request.path_info
    if not settings.APPEND_SLASH or path.endswith("/"):
        return False
    match = is_valid_path(f"{path}/", getattr(request, "urlconf", None))
    return bool(match) and getattr(match.func, "cls", None) is not ApiNotFoundView
