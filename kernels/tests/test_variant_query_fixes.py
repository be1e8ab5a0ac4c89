"""The variant table of ``GET /api/kernel-jobs/<id>/variants/`` refuses a query key it does not
take (``sortt``) naming it and the keys taken, beside every other problem of the query, as the
what-if does; the keys it takes, the parameter filters and its CSV download work as before."""
from __future__ import annotations

import csv
import io

ALLOWED = "allowed: format, batch, state, sort, limit, offset, p.<parameter>"


def test_an_unknown_query_key_is_refused_naming_the_keys_taken(viewer_api, measured_job):
    url = f"/api/kernel-jobs/{measured_job.pk}/variants/"
    resp = viewer_api.get(url, {"sortt": "us:small"})
    assert resp.status_code == 400
    assert resp.json() == {"sortt": [f"unknown field 'sortt'; {ALLOWED}"]}
    # in the CSV download too: never a file of the unsorted table
    resp = viewer_api.get(url, {"sortt": "us:small", "format": "csv"})
    assert resp.status_code == 400 and resp.json() == {"sortt": [f"unknown field 'sortt'; {ALLOWED}"]}


def test_every_problem_of_the_query_is_named_at_once(viewer_api, measured_job):
    url = f"/api/kernel-jobs/{measured_job.pk}/variants/"
    # beside a value the query's fields refuse
    resp = viewer_api.get(url, {"sortt": "x", "state": "sideways", "page": "2"})
    assert resp.status_code == 400
    body = resp.json()
    assert sorted(body) == ["page", "sortt", "state"]
    assert body["page"] == [f"unknown field 'page'; {ALLOWED}"]
    assert body["state"] == ["must be one of all, built, failed, discarded, correct, wrong, timed; got 'sideways'"]
    # beside what the job's table refuses: a parameter outside its grid, a sort key it has not
    resp = viewer_api.get(url, {"sortt": "x", "p.BLOCK": "48", "sort": "us:nowhere"})
    assert resp.status_code == 400
    body = resp.json()
    assert sorted(body) == ["p.BLOCK", "sort", "sortt"]
    assert body["p.BLOCK"] == ["'48' is not one of BLOCK's values in this job's grid: 16, 32, 64"]
    assert body["sortt"] == [f"unknown field 'sortt'; {ALLOWED}"]


def test_the_keys_it_takes_still_answer(viewer_api, measured_job):
    url = f"/api/kernel-jobs/{measured_job.pk}/variants/"
    page = viewer_api.get(url, {"batch": 4, "state": "all", "sort": "key", "limit": 2, "offset": 1,
                                "p.impl": "tiled", "format": "json"})
    assert page.status_code == 200, page.json()
    assert (page.json()["offset"], len(page.json()["rows"])) == (1, 2)
    assert {r["params"]["impl"] for r in page.json()["rows"]} == {"tiled"}
    # a p.<name> key is judged by its own rule: a name the job has not
    resp = viewer_api.get(url, {"p.nope": "1"})
    assert resp.status_code == 400 and list(resp.json()) == ["p.nope"]
    # the CSV download is the variants action's own format, not a renderer's
    download = viewer_api.get(url, {"format": "csv", "p.impl": "tiled", "sort": "key"})
    assert download.status_code == 200 and download["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(download.content.decode())))
    assert [int(r["variant_id"]) for r in rows] == [
        r["id"] for r in viewer_api.get(url, {"p.impl": "tiled", "sort": "key"}).json()["rows"]]
