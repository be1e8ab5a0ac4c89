"""The what-if's ``?format=`` is judged by the check every endpoint shares
(:class:`controlplane.drf_defaults.FormatNegotiation`), and an action listed in an
``ExportFormatMixin``'s ``format_actions`` that does not take ``format`` itself gets no format
past that check unjudged (the what-if's list was such an action: every format reached it)."""
import pytest
from rest_framework.test import APIRequestFactory, force_authenticate

from controlplane.api import ExportFormatMixin
from kernels.api.views import WhatIfViewSet

CSV_REFUSED = {"format": ["must be one of json, api; got 'csv'"]}


class _ListAsFormatAction(ExportFormatMixin, WhatIfViewSet):
    """The what-if as it was: its list named a format action, though it serves no file format."""

    format_actions = ("list",)


def test_the_whatif_refuses_a_format_through_the_shared_check(viewer_api, anon_api, seed_pd_sweep):
    query = {"sweep": seed_pd_sweep.pk, "speedup": 2}
    for fmt in ("csv", "xml"):
        answer = viewer_api.get("/api/kernel-whatif/", {**query, "format": fmt})
        assert (answer.status_code, answer.json()) == (400, {"format": [f"must be one of json, api; got '{fmt}'"]})
    assert viewer_api.get("/api/kernel-whatif/", {**query, "format": "json"}).status_code == 200
    assert viewer_api.get("/api/kernel-whatif/", {**query, "format": "api"})["Content-Type"].startswith("text/html")
    assert anon_api.get("/api/kernel-whatif/", {**query, "format": "csv"}).status_code == 401


def test_a_format_action_that_does_not_take_format_gets_no_format_unjudged(viewer, seed_pd_sweep):
    view = _ListAsFormatAction.as_view({"get": "list"})
    request = APIRequestFactory().get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "speedup": 2,
                                                              "format": "csv"})
    force_authenticate(request, user=viewer)
    answer = view(request)
    answer.render()
    assert answer.status_code == 400 and answer.data == CSV_REFUSED


@pytest.mark.django_db
def test_an_export_that_takes_format_still_judges_its_own(viewer_api):
    from kernels.models import KernelPackage

    assert KernelPackage.objects.count() == 0   # no job: the export's own check answers first
    answer = viewer_api.get("/api/kernel-jobs/1/export/?format=csv")
    assert answer.status_code == 404
    refused = viewer_api.get("/api/kernel-jobs/1/export/?format=xml")
    assert (refused.status_code, refused.json()) == (400, {"format": ["must be one of csv, json; got 'xml'"]})
