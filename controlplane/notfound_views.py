"""The JSON 404 of every path under ``/api/`` that no route matches.

The last route of :mod:`controlplane.api_urls` sends any other path under ``/api/`` here, so an
unknown endpoint (``/api/nothing/``), a lookup its route's pattern refuses
(``/api/kernel-packages/NOPE/``) or a version that is not a number
(``/api/recipes/3/versions/abc/``) is ``404 {"detail": ...}`` in JSON like
every other API error, whatever ``DEBUG`` is, instead of Django's HTML page.

Every other 404 is the HTML page of :func:`page_not_found`, saying in plain words what was not
found ("No kernel job #999.", "No page at /benchmarks/sweeps/abc/.").
"""
import re
from urllib.parse import quote

from django.apps import apps
from django.conf import settings
from django.http import HttpResponseNotFound, HttpResponsePermanentRedirect
from django.template import loader
from django.urls import is_valid_path
from rest_framework.exceptions import NotFound
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from controlplane.jsonsafe import id_text


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
    answers_any_method = True   # the 404, never a 405 (controlplane.permissions.method_allowed)
    slashed_endpoint = False

    def dispatch(self, request, *args, **kwargs):
        self.slashed_endpoint = _is_endpoint_with_slash(request)
        if self.slashed_endpoint and request.method in ("GET", "HEAD"):
            return HttpResponsePermanentRedirect(request.get_full_path(force_append_slash=True))
        return super().dispatch(request, *args, **kwargs)

    def judges_own_format(self) -> bool:
        """Always: the 404 whatever ``?format=`` is asked for (a format's 400 would hide it)."""
        return True

    def perform_content_negotiation(self, request, force=False):
        # JSON even for a client that accepts only text/html (a 406 would hide the 404)
        return super().perform_content_negotiation(request, force=True)

    def initial(self, request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)  # authentication and the role check
        hint = f"; the endpoint is {request.path}/ (with a trailing slash)" if self.slashed_endpoint else ""
        raise NotFound(f"no API endpoint at {request.path}{hint}")


def _api_not_found_route():
    """The catch-all route's callback: :class:`ApiNotFoundView` behind a plain function, with no
    ``cls`` for REST framework's breadcrumbs to take it by, so the browsable page of
    ``/api/recipes/`` reads "Api Root › Recipe List", never with this 404 between them
    (``/api/recipes`` resolves here)."""
    view = ApiNotFoundView.as_view()

    def api_not_found(request, *args, **kwargs):
        return view(request, *args, **kwargs)

    api_not_found.csrf_exempt = True
    return api_not_found


api_not_found = _api_not_found_route()


def _is_endpoint_with_slash(request) -> bool:
    """True when ``settings.APPEND_SLASH`` is on, ``request``'s path has no trailing slash and,
    with one, names a route other than :class:`ApiNotFoundView`."""
    path = request.path_info
    if not settings.APPEND_SLASH or path.endswith("/"):
        return False
    match = is_valid_path(f"{path}/", getattr(request, "urlconf", None))
    return bool(match) and match.func is not api_not_found


_NO_MATCH = re.compile(r"No (\w+) matches the given query\.?")


def not_found_text(request, exception) -> str:
    """What a 404 page says was not found, in one sentence ending in one period:
    ``get_object_or_404``'s "No KernelJob matches the given query." becomes "No kernel job #999."
    (the model's verbose name and the path's lookup), a path no route matches (Django's
    ``Resolver404``) or a bare ``Http404`` "No page at /benchmarks/sweeps/abc/.", and any other
    message is shown as raised (a field name it starts with keeps its case), ending in one period."""
    message = exception.args[0] if exception is not None and exception.args else None
    if not isinstance(message, str) or not message.strip():
        return f"No page at {request.path}."
    if match := _NO_MATCH.fullmatch(message.strip()):
        noun = next((m._meta.verbose_name for m in apps.get_models() if m._meta.object_name == match[1]),
                    match[1])
        kwargs = getattr(getattr(request, "resolver_match", None), "kwargs", None) or {}
        if "pk" in kwargs:
            return f"No {noun} #{id_text(kwargs['pk'])}."
        if len(kwargs) != 1:
            return f"No {noun} at {request.path}."
        value = next(iter(kwargs.values()))
        return f"No {noun} #{id_text(value)}." if isinstance(value, int) else f"No {noun} '{value}'."
    return f"{message.strip().rstrip('.').rstrip()}."


def api_not_found_text(message: str, route_kwargs: dict, path: str) -> str:
    """What an API 404 says was not found, in the API's wording (``no node with name 'nosuch'``, as
    :class:`deployments.api.views.NodeViewSet` says it): ``get_object_or_404``'s "No Node matches
    the given query." names the model by its verbose name and the route's one key by its name
    (``pk`` as ``id``, digits bare, any other value in quotes); with no key, or several, the path
    (``no benchmark run at /api/...``). Any other message is returned as raised."""
    match = _NO_MATCH.fullmatch(message.strip())
    if not match:
        return message
    noun = next((m._meta.verbose_name for m in apps.get_models() if m._meta.object_name == match[1]), match[1])
    if len(route_kwargs) != 1:
        return f"no {noun} at {path}"
    (key, value), = route_kwargs.items()
    shown = id_text(value)
    return f"no {noun} with {'id' if key == 'pk' else key} {shown}"


def api_lookup_refused_text(view, path: str) -> str | None:
    """What an API 404 says for a path whose key the lookup cannot take (``/api/runs/abc/``, where
    REST framework's ``get_object_or_404`` raises a bare ``Http404`` for the ``ValueError`` of an id
    that is not a number): the wording of :func:`api_not_found_text` for the view's model (``no
    benchmark run with id 'abc'``). None for a view with no queryset to name the model by."""
    try:
        model = view.get_queryset().model
    except Exception:   # a view with no queryset, or one that judges the query first: DRF's own 404
        return None
    return api_not_found_text(f"No {model._meta.object_name} matches the given query.",
                              getattr(view, "kwargs", None) or {}, path)


def page_not_found(request, exception):
    """The HTML 404 of every page (``handler404``): ``templates/404.html`` with ``message``
    (:func:`not_found_text`) and the path asked for, never an exception's class name."""
    message = not_found_text(request, exception)
    context = {"message": message, "request_path": quote(request.path),
               "show_path": request.path not in message}
    return HttpResponseNotFound(loader.get_template("404.html").render(context, request))
