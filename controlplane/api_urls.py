"""REST API router: every app registers its viewsets here. The last route answers every other
path under ``/api/`` with a JSON 404 (:class:`controlplane.notfound_views.ApiNotFoundView`, which is no breadcrumb
of the browsable pages).

Every route also answers with a format suffix (``/api/recipes/3.json``,
``/api/sweeps/2/export.csv``, ``/api/nodes/local/telemetry.json``): the suffix is the request's
``?format=`` (:class:`ApiRouter`), so a suffixed URL answers exactly as its plain one with that
``?format=`` does, an extra action's included."""
import functools

from django.urls import URLPattern, re_path
from rest_framework.routers import DefaultRouter
from rest_framework.settings import api_settings

from benchmarks.api.urls import register as register_benchmarks
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
    given twice, a 400 as for ``?format=`` given twice."""
    suffix_kwarg = api_settings.FORMAT_SUFFIX_KWARG
    query_key = api_settings.URL_FORMAT_OVERRIDE

    @functools.wraps(view)
    def view_with_suffix(request, *args, **kwargs):
        suffix = kwargs.pop(suffix_kwarg, None)
        if suffix is not None:
            query = request.GET.copy()
            query.setlist(query_key, [suffix, *query.getlist(query_key)])
            request.GET = query
        return view(request, *args, **kwargs)

    return view_with_suffix


class ApiRouter(DefaultRouter):
    """REST framework's ``DefaultRouter`` whose format-suffixed routes hand the suffix to the view
    as ``?format=`` (:func:`suffix_as_format_query`), for every viewset and action alike."""

    def get_urls(self):
        suffix_kwarg = api_settings.FORMAT_SUFFIX_KWARG
        return [
            URLPattern(url.pattern, suffix_as_format_query(url.callback), url.default_args, url.name)
            if isinstance(url, URLPattern) and suffix_kwarg in url.pattern.regex.groupindex else url
            for url in super().get_urls()
        ]


router = ApiRouter()
register_deployments(router)
register_benchmarks(router)
register_kernels(router)

urlpatterns = router.urls + [
    re_path(r"^.*$", api_not_found, name="api-not-found"),
]
