"""A grid summary's ``pruned[].index`` is an integer (the constraint's position) or null, and
``source`` says what left the combinations out: in the API (a job's ``grid_summary``, typed in the
schema), the JSON export and the job page, also for a summary stored when ``index`` held
``"only"`` or ``"cuda.requires"``."""
from __future__ import annotations

import json

import pytest

from kernels.manifest import grid_summary_read
from kernels.models import KernelJob
from kernels.services import kernel_job_create

pytestmark = pytest.mark.django_db

OLD = {"variants": 3, "combinations": 12, "pruned_total": 9, "subset": None, "pruned": [
    {"index": 0, "constraint": "impl != 'baseline' or BLOCK == 16", "pruned": 4},
    {"index": "cuda.requires", "constraint": "impl == 'baseline' or cc == 90 (target cc 12.0)", "pruned": 3},
    {"index": "only", "constraint": "not among the measured variants", "pruned": 2}]}


def test_a_stored_summary_with_a_text_index_reads_as_null_with_its_source():
    read = grid_summary_read(OLD)
    assert [(p["index"], p["source"]) for p in read["pruned"]] == [
        (0, "constraint"), (None, "cuda.requires"), (None, "variants_file")]
    assert OLD["pruned"][1]["index"] == "cuda.requires"  # the stored value is left as it is
    assert grid_summary_read(None) == {} and grid_summary_read(read) == read


def test_the_api_export_and_job_page_show_an_integer_or_null(toy_package, operator_api, operator, client):
    job = kernel_job_create(package=toy_package, node=None, cc="9.0", dispatch=False)
    pruned = operator_api.get(f"/api/kernel-jobs/{job.pk}/").json()["grid_summary"]["pruned"]
    assert [(p["index"], p["source"]) for p in pruned] == [(0, "constraint"), (1, "constraint")]
    KernelJob.objects.filter(pk=job.pk).update(grid_summary=OLD)
    pruned = operator_api.get(f"/api/kernel-jobs/{job.pk}/").json()["grid_summary"]["pruned"]
    assert [p["index"] for p in pruned] == [0, None, None]
    assert [p["source"] for p in pruned] == ["constraint", "cuda.requires", "variants_file"]
    export = json.loads(operator_api.get(f"/api/kernel-jobs/{job.pk}/export/?format=json").content)
    assert [p["index"] for p in export["grid"]["pruned"]] == [0, None, None]
    client.force_login(operator)
    html = client.get(f"/kernels/jobs/{job.pk}/").content.decode()
    assert "3 left out: this target cannot build them" in html


def test_the_schema_types_the_index_as_an_integer_or_null():
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    index = schema["Pruned"]["properties"]["index"]
    assert index["type"] == "integer" and index["nullable"] is True
    assert schema["Job"]["properties"]["grid_summary"]["allOf"][0]["$ref"].endswith("/GridSummary")
