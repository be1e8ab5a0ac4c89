"""REST API router: every app registers its viewsets here. The last route answers every other
path under ``/api/`` with a JSON 404 (:class:`controlplane.notfound_views.ApiNotFoundView`, which is no breadcrumb
of the browsable pages).

Every route also answers with a format suffix (``/api/recipes/3.json``,
``/api/sweeps/2/export.csv``, ``/api/nodes/local/telemetry.json``): the suffix is the request's
``?format=`` (:class:`ApiRouter`), so a suffixed URL answers exactly as its plain one with that
``?format=`` does, an extra action's included. A format is read in any case: ``.JSON``,
``export.CSV`` and ``?format=Csv`` answer as their lower-case spelling."""
import functools

from django.urls import URLPattern, re_path, register_converter
from rest_framework.routers import DefaultRouter
from rest_framework.settings import api_settings
from rest_framework.urlpatterns import apply_suffix_patterns

from benchmarks.api.urls import register as register_benchmarks
from controlplane.api import format_suffix_into_query
from controlplane.notfound_views import api_not_found
from deployments.api.urls import register as register_deployments
from kernels.api.urls import register as register_kernels


def suffix_as_format_query(view):
    """``view`` (a route's callback) with the path's format suffix (REST framework's ``format``
    route argument, ``.csv`` of ``export.csv``) turned into the request's ``?format=``: an action
    never receives it as an argument it does not take (a ``TypeError``, a 500), and the action and
    the content negotiation judge it exactly as the same ``?format=`` (an export's ``csv`` is its
    CSV file, ``json`` on a JSON action is the plain answer, a format the action does not answer
    in is the 400 naming those it does). A ``?format=`` given beside the suffix makes the format
    given twice, a 400 as for ``?format=`` given twice. Every format, suffix or query, is handed on
    in lower case: every format name is (``csv``, ``json``, ``api``), so ``.JSON`` names no other."""
    suffix_kwarg = api_settings.FORMAT_SUFFIX_KWARG

    @functools.wraps(view)
    def view_with_suffix(request, *args, **kwargs):
        format_suffix_into_query(request, kwargs.pop(suffix_kwarg, None))
        return view(request, *args, **kwargs)

    return view_with_suffix


class FormatSuffixConverter:
    """A ``path()`` route's format suffix after its dot, in any case (``json``, ``JSON``): REST
    framework's own converter, like its suffix regex, takes lower case only, which made ``.JSON`` a
    404. The dot stays in the route, so the schema leaves the suffixed route out (``.{format}``)
    as it does the router's."""

    regex = r"[A-Za-z0-9]+/?"

    def to_python(self, value: str) -> str:
        return value.strip("/")

    def to_url(self, value: str) -> str:
        return value


register_converter(FormatSuffixConverter, "format_suffix_any_case")


def with_format_suffix(patterns: list) -> list:
    """``patterns`` and, beside each, its format-suffixed route (``/api/runs/3.json``,
    ``/api/schema.json``) in any case, every one through :func:`suffix_as_format_query` (the
    suffix becomes ``?format=``; every format is read in lower case)."""
    suffix_kwarg = api_settings.FORMAT_SUFFIX_KWARG
    suffixed = apply_suffix_patterns(patterns, rf"\.(?P<{suffix_kwarg}>[A-Za-z0-9]+)/?$", False,
                                     f".<format_suffix_any_case:{suffix_kwarg}>")
    return [
        URLPattern(url.pattern, suffix_as_format_query(url.callback), url.default_args, url.name)
        if isinstance(url, URLPattern) else url
        for url in suffixed
    ]


class ApiRouter(DefaultRouter):
    """REST framework's ``DefaultRouter`` whose routes, format-suffixed ones in any case included,
    hand the suffix to the view as ``?format=`` in lower case (:func:`with_format_suffix`), for
    every viewset and action alike."""

    include_format_suffixes = False   # added by get_urls, in any case

    def get_urls(self):
        return with_format_suffix(super().get_urls())


router = ApiRouter()
register_deployments(router)
register_benchmarks(router)
register_kernels(router)

urlpatterns = router.urls + [
    re_path(r"^.*$", api_not_found, name="api-not-found"),
]
