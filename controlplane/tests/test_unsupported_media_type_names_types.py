"""A 415 for a content type no parser of the endpoint takes keeps REST framework's ``{"detail"}``
and names the content types the endpoint does take, from its parser classes."""
from __future__ import annotations

import pytest
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from controlplane.drf_defaults import SafeJSONParser

pytestmark = pytest.mark.django_db

EVERY = "send application/json (or application/x-www-form-urlencoded or multipart/form-data)"


@pytest.mark.parametrize("path", ["/api/recipes/", "/api/runs/import/", "/api/kernel-jobs/"])
def test_it_names_the_types_an_endpoint_takes(operator_api, path):
    response = operator_api.post(path, data=b"name=x", content_type="text/plain")
    assert response.status_code == 415
    assert response.json() == {"detail": f'Unsupported media type "text/plain" in request; {EVERY}'}


def test_a_body_of_xml_names_its_own_type(operator_api):
    response = operator_api.post("/api/sweeps/", data=b"<sweep/>", content_type="application/xml")
    assert response.status_code == 415
    assert response.json()["detail"] == f'Unsupported media type "application/xml" in request; {EVERY}'


class _JsonOnly(APIView):
    authentication_classes: list = []
    permission_classes: list = []
    parser_classes = [SafeJSONParser]

    def post(self, request):
        return Response(dict(request.data))


def test_an_endpoint_that_takes_json_alone_names_json_alone():
    request = APIRequestFactory().post("/x/", data=b"a=1", content_type="application/x-www-form-urlencoded")
    response = _JsonOnly.as_view()(request)
    response.render()
    assert response.status_code == 415
    assert response.data == {"detail": 'Unsupported media type "application/x-www-form-urlencoded" in request; '
                                       'send application/json'}
