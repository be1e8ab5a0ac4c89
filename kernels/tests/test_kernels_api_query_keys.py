"""The kernels API refuses a query key it does not take, naming it and the keys taken
(controlplane.drf_defaults.KnownQueryKeys); the variant table and the what-if keep naming theirs
beside every other problem of the query; an export names the formats it serves."""
import pytest

ALLOWED_BEST = "allowed: package, device, shape, batch, limit, offset, format"


def test_an_unsupported_best_filter_is_a_400_not_every_row(viewer_api, measured_job):
    rows = viewer_api.get("/api/kernel-best/").json()
    assert rows["count"] >= 2 and {r["cc"] for r in rows["results"]} == {"9.0"}
    answer = viewer_api.get("/api/kernel-best/?cc=8.0&compiler=nvcc")
    assert answer.status_code == 400
    assert answer.json() == {"cc": [f"unknown field 'cc'; {ALLOWED_BEST}"],
                             "compiler": [f"unknown field 'compiler'; {ALLOWED_BEST}"]}


@pytest.mark.parametrize("path, key, allowed", [
    ("/chart/?shape=small&batch=1", "batch", "shape, format"),
    ("/best/?shape=small", "shape", "limit, offset, format"),
    ("/export/?format=csv&all=1", "all", "format"),
    ("/?verbose=1", "verbose", "format"),
])
def test_a_job_action_names_the_keys_it_takes(viewer_api, measured_job, path, key, allowed):
    answer = viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}{path}")
    assert answer.status_code == 400 and answer.json() == {key: [f"unknown field '{key}'; allowed: {allowed}"]}


def test_a_best_variant_and_its_config_take_no_key(viewer_api, measured_job):
    best = viewer_api.get("/api/kernel-best/").json()["results"][0]
    for path in (f"/api/kernel-best/{best['id']}/?x=1", f"/api/kernel-best/{best['id']}/config/?x=1"):
        answer = viewer_api.get(path)
        assert answer.status_code == 400 and answer.json() == {"x": ["unknown field 'x'; allowed: format"]}
    # a format the config file does not come in is a 400 naming those it does
    answer = viewer_api.get(f"/api/kernel-best/{best['id']}/config/?format=csv")
    assert answer.status_code == 400 and answer.json() == {"format": ["must be one of json, api; got 'csv'"]}


def test_the_keys_taken_still_work(viewer_api, measured_job):
    assert viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/chart/?shape=small").status_code == 200
    page = viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/best/?limit=1&offset=1").json()
    assert len(page["results"]) == 1 and page["count"] >= 2
    table = viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/variants/?batch=4&p.impl=tiled&limit=2")
    assert table.status_code == 200 and table.json()["total"] >= 2


def test_the_variant_table_names_an_unknown_key_with_every_other_problem(viewer_api, measured_job):
    answer = viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/variants/?sortt=key&state=nope")
    assert answer.status_code == 400
    body = answer.json()
    assert body["sortt"] == ["unknown field 'sortt'; allowed: format, batch, state, sort, limit, offset, p.<parameter>"]
    assert "state" in body


def test_the_whatif_names_an_unknown_key_with_every_other_problem(viewer_api):
    answer = viewer_api.get("/api/kernel-whatif/?shares=0.5&speedup=0")
    assert answer.status_code == 400
    body = answer.json()
    assert body["shares"] == ["unknown field 'shares'; allowed: sweep, share, speedup, best, format"]
    assert "sweep" in body and "speedup" in body


def test_a_job_export_names_the_formats_it_serves(viewer_api, measured_job):
    answer = viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/export/?format=xml")
    assert answer.status_code == 400 and answer.json() == {"format": ["must be one of csv, json; got 'xml'"]}
    assert viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/export/?format=csv").status_code == 200
