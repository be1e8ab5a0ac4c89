"""The OpenAPI schema's descriptions are plain text: the Sphinx roles of the docstrings they come
from are written as the name they point at (controlplane.api.postprocess_plain_descriptions)."""
import json

import pytest

from controlplane.api import plain_description

ROLES = (":func:`", ":meth:`", ":class:`", ":data:`", ":attr:`", ":mod:`")


def _texts(node, key=None):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _texts(v, k)
    elif isinstance(node, list):
        for item in node:
            yield from _texts(item, key)
    elif key in ("description", "summary") and isinstance(node, str):
        yield node


@pytest.mark.django_db
def test_no_description_in_the_schema_holds_a_sphinx_role(viewer_api):
    schema = viewer_api.get("/api/schema/?format=json").json()
    texts = list(_texts(schema))
    assert len(texts) > 100
    leaks = [t for t in texts if any(role in t for role in ROLES)]
    assert leaks == []
    job = schema["components"]["schemas"]["JobCreateRequest"]["description"]
    assert "as kernel_job_check judges it" in job and "see to_internal_value" in job
    assert ":func:" not in json.dumps(schema)


def test_a_reference_reads_as_its_last_name_or_its_title():
    assert plain_description("see :func:`kernels.services.kernel_job_check` and :meth:`to_internal_value`.") == (
        "see kernel_job_check and to_internal_value.")
    assert plain_description(":class:`~benchmarks.models.BenchmarkRun`, :attr:`the total <x.Y.total>`") == (
        "BenchmarkRun, the total")
    assert plain_description("``code`` and a ratio 1:2 stay") == "``code`` and a ratio 1:2 stay"
