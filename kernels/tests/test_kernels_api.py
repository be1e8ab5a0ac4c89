"""The kernels REST API: viewers read, operators start and cancel jobs, outsiders and anonymous
clients are refused; the variant table filters and sorts on the server; exports and the what-if."""
import csv
import io
import json
import re

import pytest
from django.test import Client

from kernels.models import KernelBest, KernelJob
from kernels.tests.conftest import BASE, T32, T64


def test_anonymous_and_role_less_users_are_refused(anon_api, outsider_api, measured_job):
    for url in ("/api/kernel-packages/", "/api/kernel-jobs/", f"/api/kernel-jobs/{measured_job.pk}/variants/",
                "/api/kernel-best/", "/api/kernel-whatif/?sweep=1&speedup=2"):
        assert anon_api.get(url).status_code == 401, url
        assert outsider_api.get(url).status_code == 403, url
    assert outsider_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "h200-box"}, format="json").status_code == 403


def test_viewers_read_packages_jobs_and_best_variants(viewer_api, measured_job):
    pkgs = viewer_api.get("/api/kernel-packages/").json()["results"]
    assert [p["name"] for p in pkgs] == ["toy_attn"] and pkgs[0]["grid"]["variants"] == 7
    one = viewer_api.get("/api/kernel-packages/toy_attn/").json()
    assert one["grid"]["pruned"][0] == {"index": 0, "source": "constraint",
                                        "constraint": "impl != 'baseline' or BLOCK == 16", "pruned": 4}
    assert one["dtype"] == one["manifest"]["dtype"] and one["dtype"]  # at the top, not only inside the manifest
    job = viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/").json()
    assert job["device_name"] == "NVIDIA H200" and job["hbm_gbps"] == 4000.0 and job["builds_discarded"] == 1
    best = viewer_api.get("/api/kernel-best/?package=toy_attn&shape=small").json()["results"]
    assert [(b["batch"], b["key"], b["speedup"]) for b in best] == [(1, T32, 4.0), (4, T32, 4.0)]
    best = viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/best/").json()
    assert best["results"][0]["device_name"] == "NVIDIA H200"
    # paged as every list: a page of one names the next
    assert best["count"] == len(best["results"]) >= 2
    first = viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/best/?limit=1").json()
    assert first["count"] == best["count"] and len(first["results"]) == 1 and "offset=1" in first["next"]
    assert first["results"][0] == best["results"][0]
    cfg = viewer_api.get(f"/api/kernel-best/{best['results'][0]['id']}/config/")
    assert cfg.status_code == 200 and json.loads(cfg.content)["1"] == {"impl": "tiled", "BLOCK": 32, "num_warps": 4}


def test_viewers_cannot_start_or_cancel_jobs(viewer_api, measured_job):
    assert viewer_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "h200-box"}, format="json").status_code == 403
    assert viewer_api.post(f"/api/kernel-jobs/{measured_job.pk}/cancel/").status_code == 403


def test_operators_start_and_cancel_jobs(operator_api, toy_package, h200_node, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        resp = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "h200-box",
                                                       "params": {"impl": ["tiled"]}, "batches": [1]}, format="json")
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["target_cc"] == "9.0" and body["variants_total"] == 5 and body["status"] == "pending"
    assert body["created_by"] == "oscar-operator" and len(callbacks) == 1
    resp = operator_api.post(f"/api/kernel-jobs/{body['id']}/cancel/")
    assert resp.status_code == 200 and resp.json()["status"] == "cancelled"
    assert operator_api.post(f"/api/kernel-jobs/{body['id']}/cancel/").status_code == 409


def test_the_api_says_a_finished_jobs_phase_as_the_page_does(viewer_api, measured_job):
    KernelJob.objects.filter(pk=measured_job.pk).update(status="benchmarking", phase="bench")
    assert viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/").json()["phase"] == "bench"
    for status in ("done", "failed", "cancelled"):
        KernelJob.objects.filter(pk=measured_job.pk).update(status=status, phase="bench")
        assert viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/").json()["phase"] == status


def test_job_creation_refuses_an_unknown_key_with_the_other_problems(operator_api, toy_package, h200_node):
    resp = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "h200-box", "foo": 1,
                                                   "batches": [0]}, format="json")
    assert resp.status_code == 400
    body = resp.json()
    assert body["foo"] == ["unknown field 'foo'; allowed: package, node, cc, params, shapes, batches"]
    assert body["batches.0"] == ["must be between 1 and 2147483647, got 0"]
    assert KernelJob.objects.count() == 0


def test_job_creation_reports_a_bad_batch_with_the_packages_own_checks(operator_api, toy_package, h200_node):
    resp = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "h200-box", "cc": "9.5",
                                                   "params": {"impl": ["nope"]}, "shapes": ["zzz"], "batches": [0]},
                             format="json")
    assert resp.status_code == 400
    body = resp.json()
    assert set(body) == {"cc", "params.impl", "shapes", "batches.0"}, body
    assert body["batches.0"] == ["must be between 1 and 2147483647, got 0"]
    assert body["cc"][0].startswith("'9.5' is not a known compute capability")
    # a field the serializer refuses is reported once, by the serializer, with the rest
    resp = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "h200-box", "cc": "9" * 20,
                                                   "shapes": ["zzz"]}, format="json")
    assert resp.json()["cc"] == ["Ensure this field has no more than 8 characters."]
    assert set(resp.json()) == {"cc", "shapes"}, resp.json()
    assert KernelJob.objects.count() == 0


def test_job_creation_errors_name_the_field(operator_api, toy_package, cpu_node):
    resp = operator_api.post("/api/kernel-jobs/", {"package": "nope", "node": "nowhere"}, format="json")
    assert resp.status_code == 400
    assert resp.json() == {"package": ["no registered kernel package named 'nope'"], "node": ["no node named 'nowhere'"]}
    resp = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "cpu-box",
                                                   "params": {"BLOCK": [48]}}, format="json")
    assert resp.status_code == 400
    body = resp.json()
    assert body["params.BLOCK"] == ["48 is not one of the grid's values [16, 32, 64]"]
    assert "cc" in body  # a node without GPUs needs the target named
    # an unknown node does not hide the other fields' problems
    resp = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "nowhere", "cc": "7.7",
                                                   "params": {"bogus": [1]}, "shapes": ["x"], "batches": [3]},
                             format="json")
    assert resp.status_code == 400
    assert set(resp.json()) >= {"node", "cc", "params.bogus", "shapes", "batches"}, resp.json()


def test_the_variant_table_filters_and_sorts_on_the_server(viewer_api, measured_job):
    url = f"/api/kernel-jobs/{measured_job.pk}/variants/"
    table = viewer_api.get(url, {"batch": 4, "sort": "us:small"}).json()
    assert table["batch"] == 4 and table["shapes"] == ["small", "wide"]
    timed = [r["key"] for r in table["rows"] if r["shapes"].get("small", {}).get("median_us") is not None]
    assert timed == [T32, "impl=tiled,BLOCK=32,num_warps=8", BASE]  # fastest first; untimed rows after
    desc = viewer_api.get(url, {"batch": 4, "sort": "-us:small"}).json()["rows"]
    assert desc[0]["key"] == BASE
    discarded = viewer_api.get(url, {"state": "discarded"}).json()["rows"]
    assert [(r["key"], r["build"]["discard_reason"]) for r in discarded] == [
        (T64, "spills 64 bytes of registers to local memory")]
    failed = viewer_api.get(url, {"state": "failed"}).json()["rows"]
    assert failed[0]["build"]["error"] == "CompilationError: boom"
    wrong = viewer_api.get(url, {"state": "wrong", "batch": 1}).json()["rows"]
    assert [r["key"] for r in wrong] == ["impl=tiled,BLOCK=16,num_warps=4"]
    only_base = viewer_api.get(url, {"p.impl": "baseline"}).json()
    assert only_base["total"] == 2 and {r["params"]["impl"] for r in only_base["rows"]} == {"baseline"}
    assert only_base["rows"][0]["best_in"] == []
    best_row = viewer_api.get(url, {"p.impl": "tiled", "p.BLOCK": "32", "p.num_warps": "4", "batch": 1}).json()["rows"][0]
    assert best_row["best_in"] == ["small", "wide"]
    assert viewer_api.get(url, {"state": "sideways"}).status_code == 400
    # pages of the sorted table: offset skips rows, total counts them all
    whole = viewer_api.get(url, {"sort": "key"}).json()
    page = viewer_api.get(url, {"sort": "key", "offset": 2, "limit": 2}).json()
    assert page["offset"] == 2 and page["total"] == whole["total"] > 4
    assert [r["id"] for r in page["rows"]] == [r["id"] for r in whole["rows"][2:4]]
    assert viewer_api.get(url, {"offset": -1}).status_code == 400
    # one value per key: batch=4&batch=1 takes neither
    resp = viewer_api.get(f"{url}?batch=4&batch=1")
    assert resp.status_code == 400 and resp.json() == {"batch": ["is given 2 times (4, 1): give it once"]}


def test_a_parameter_filter_outside_the_grid_is_a_400_listing_the_values(viewer_api, viewer, measured_job):
    url = f"/api/kernel-jobs/{measured_job.pk}/variants/"
    for params in ({"p.BLOCK": "48"}, {"p.BLOCK": "48", "p.impl": "tiled"}):
        resp = viewer_api.get(url, params)
        assert resp.status_code == 400, params
        # under the query key that holds it, as every other parameter's error
        assert resp.json() == {"p.BLOCK": ["'48' is not one of BLOCK's values in this job's grid: 16, 32, 64"]}
    resp = viewer_api.get(url, {"p.BLOCK": "abc"})
    assert resp.status_code == 400
    assert resp.json() == {"p.BLOCK": ["'abc' is not one of BLOCK's values in this job's grid: 16, 32, 64"]}
    resp = viewer_api.get(url, {"p.impl": "fused", "p.nope": "1"})
    assert resp.status_code == 400 and resp.json() == {
        "p.impl": ["'fused' is not one of impl's values in this job's grid: baseline, tiled"],
        "p.nope": ["not a parameter of this job; parameters: impl, BLOCK, num_warps (filter as p.<parameter>=<value>)"]}
    # values of the grid that match no row (a constraint keeps the baseline at BLOCK 16) are an
    # empty table, not an error
    empty = viewer_api.get(url, {"p.impl": "baseline", "p.BLOCK": "32"})
    assert empty.status_code == 200 and empty.json()["total"] == 0
    # the page says why the filter was not applied, and shows the whole table
    page = Client()
    page.force_login(viewer)
    html = page.get(f"/kernels/jobs/{measured_job.pk}/?p.BLOCK=48").content.decode()
    assert "p.BLOCK: &#x27;48&#x27; is not one of BLOCK&#x27;s values in this job&#x27;s grid: 16, 32, 64" in html


def test_it_exports_the_job_as_csv_and_json(viewer_api, measured_job):
    resp = viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/export/?format=csv")
    assert resp.status_code == 200 and resp["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(resp.content.decode())))
    timed = [r for r in rows if r["median_us"]]
    assert len(timed) == 12 and {"param.impl", "registers", "roofline_fraction", "gbps"} <= set(rows[0])
    body = json.loads(viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/export/?format=json").content)
    assert body["job"]["device"]["bf16_tflops"] == 700.0 and len(body["best"]) == 4


def test_the_variant_table_downloads_as_csv_with_the_rows_the_json_shows(viewer_api, viewer, measured_job):
    url = f"/api/kernel-jobs/{measured_job.pk}/variants/"
    query = {"batch": 4, "sort": "us:small", "p.impl": "tiled"}
    table = viewer_api.get(url, query).json()
    resp = viewer_api.get(url, {**query, "format": "csv"})
    assert resp.status_code == 200 and resp["Content-Type"].startswith("text/csv")
    assert resp["Content-Disposition"] == f'attachment; filename="kernel-job-{measured_job.pk}-variants-batch-4.csv"'
    rows = list(csv.DictReader(io.StringIO(resp.content.decode())))
    assert [int(r["variant_id"]) for r in rows] == [r["id"] for r in table["rows"]]   # the same rows, same order
    first = rows[0]
    assert (first["key"], first["param.impl"], first["param.BLOCK"], first["batch"], first["state"]) == (
        T32, "tiled", "32", "4", "correct")
    assert float(first["small.median_us"]) == table["rows"][0]["shapes"]["small"]["median_us"] == 30.0
    assert (first["small.best"], first["wide.best"], first["registers"], first["build_ok"]) == (
        "true", "true", "128", "true")
    assert {"build_s", "spills_bytes", "shared_bytes", "wide.p90_us", "wide.gbps",
            "wide.roofline_fraction"} <= set(first)
    # limit and offset cut the rows as they cut the JSON's; a bad query is the JSON 400 it always is
    page = viewer_api.get(url, {**query, "format": "csv", "limit": 2, "offset": 1})
    assert [int(r["variant_id"]) for r in csv.DictReader(io.StringIO(page.content.decode()))] == [
        r["id"] for r in table["rows"][1:3]]
    bad = viewer_api.get(url, {"format": "csv", "p.BLOCK": "48"})
    assert bad.status_code == 400 and list(bad.json()) == ["p.BLOCK"]
    bad = viewer_api.get(url, {"format": "xml"})
    assert bad.status_code == 400 and bad.json() == {"format": ["must be one of json, csv; got 'xml'"]}
    # the job page links to this view of the table as CSV
    html = Client()
    html.force_login(viewer)
    body = html.get(f"/kernels/jobs/{measured_job.pk}/", query).content.decode()
    link = re.search(r'<a class="table-csv" href="([^"]+)"', body).group(1).replace("&amp;", "&")
    assert viewer_api.get(link).content == resp.content


def test_the_chart_endpoint_gives_time_per_implementation_and_the_roofline(viewer_api, measured_job):
    data = viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/chart/?shape=wide").json()
    assert [s["label"] for s in data["series"]] == ["baseline", "tiled"]
    assert data["series"][1]["points"] == [[1, 10.0], [4, 30.0]]
    nbytes = 4 * 256 * 128 * 2 + 4 * 16 * 256 * 2
    assert data["roofline"][1] == [4, pytest.approx(nbytes / 4000e9 * 1e6)]
    assert viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/chart/?shape=huge").status_code == 400


def test_the_whatif_api_takes_a_speedup_or_a_best_variants(viewer_api, measured_job, seed_pd_sweep):
    sweep = seed_pd_sweep
    resp = viewer_api.get("/api/kernel-whatif/", {"sweep": sweep.pk, "share": 0.63, "speedup": 3})
    assert resp.status_code == 200, resp.content
    assert resp.json()["lengths"]["256/256"][0]["projected_tpot_ms"] == pytest.approx(94.0 * 0.58)
    best = KernelBest.objects.filter(job=measured_job, shape="small", batch=1).get()
    resp = viewer_api.get("/api/kernel-whatif/", {"sweep": sweep.pk, "best": best.pk})
    body = resp.json()
    assert body["speedup"] == pytest.approx(4.0) and body["speedup_source"].startswith(f"best variant #{best.pk}")
    assert body["share"] == pytest.approx(0.63) and body["share_source"].startswith("default: 0.63, the seed")
    assert viewer_api.get("/api/kernel-whatif/", {"sweep": sweep.pk, "share": 0.5, "speedup": 2}).json()[
        "share_source"] == "given"
    # an empty share is refused, naming it, never silently the default (test_whatif_empty_parameters.py)
    empty = viewer_api.get(f"/api/kernel-whatif/?sweep={sweep.pk}&speedup=2&share=")
    assert (empty.status_code, empty.json()) == (
        400, {"share": ["query parameter 'share' is empty: give a value or leave it out"]})
    resp = viewer_api.get(f"/api/kernel-whatif/?sweep={sweep.pk}&speedup=3&speedup=4")
    assert resp.status_code == 400 and resp.json() == {"speedup": ["is given 2 times (3, 4): give it once"]}
    assert body["factor"] == pytest.approx(0.37 + 0.63 / 4)
    # Where the speedup comes from (batch, and a GPU other than the one the seed profile models),
    # and a shape that is not the sweep's model, are said.
    # Last, why the sim profile's running batch is not the ceiling analysis' (tests/test_running_batch_per_point.py).
    assert body["notes"][-1].startswith("the running batch of the sim-profile model is not the ceiling analysis' "
                                        "(256/256 c=1: model 1.0, analysis 0.94)")
    assert body["notes"][:-1] == [
        "the speedup 4.00× was measured at batch 1 of shape small; the same job's best variants give 4.00× at "
        "batch 1, 4.00× at batch 4: the decode batch of a point decides which applies, so pick the best variant "
        "of the batch you care about",
        "the speedup 4.00× is over package toy_attn's own baseline implementation (its variants with impl = "
        "'baseline'), both measured on NVIDIA H200 (sm_90); it is not a speedup over the kernel a deployment serves "
        "with now, which may already be faster than that baseline",
        "the speedup was measured on NVIDIA H200 (sm_90); the sweep's sim profile models 8x sm_120 GPUs, TP4 per role: a "
        "kernel's speedup on another GPU differs, so read the projection as what sm_90's speedup would give there",
        "the kernel's shape 'small' is not named in the sweep's model 'DeepSeek-V4-Flash': check that this model "
        "runs that shape"]
    assert viewer_api.get("/api/kernel-whatif/", {"sweep": sweep.pk}).status_code == 400
    assert viewer_api.get("/api/kernel-whatif/", {"sweep": 999999, "speedup": 2}).status_code == 404


def test_the_openapi_schema_lists_the_kernel_endpoints(admin_api):
    schema = admin_api.get("/api/schema/?format=json").json()
    paths = set(schema["paths"])
    assert {"/api/kernel-jobs/", "/api/kernel-jobs/{id}/variants/", "/api/kernel-whatif/",
            "/api/kernel-packages/{name}/"} <= paths


def test_a_parameter_mixing_numbers_and_text_sorts_numbers_first_then_text_absent_last(viewer_api, split_package):
    from kernels.services import kernel_job_create

    job = kernel_job_create(package=split_package, node=None, cc="9.0", dispatch=False)
    assert job.variants_total == 10
    # a variant without the parameter (a job made before it was added to the grid) sorts last
    last = job.variants.get(ordinal=0)
    last.params = {k: v for k, v in last.params.items() if k != "NUM_SPLITS"}
    last.save()
    url = f"/api/kernel-jobs/{job.pk}/variants/"
    resp = viewer_api.get(url, {"sort": "param:NUM_SPLITS"})
    assert resp.status_code == 200, resp.content
    assert [r["params"].get("NUM_SPLITS") for r in resp.json()["rows"]] == [2, 2, 2, 8, 8, 8, "auto", "auto", "auto",
                                                                            None]
    resp = viewer_api.get(url, {"sort": "-param:NUM_SPLITS"})
    assert resp.status_code == 200, resp.content
    assert resp.json()["sort"] == "-param:NUM_SPLITS"
    assert [r["params"].get("NUM_SPLITS") for r in resp.json()["rows"]] == ["auto", "auto", "auto", 8, 8, 8, 2, 2, 2,
                                                                            None]


def test_non_ascii_digits_are_a_400_like_any_malformed_number(viewer_api, measured_job, seed_pd_sweep):
    # "²".isdigit() is true, but int("²") raises: these must be refused, never a 500
    resp = viewer_api.get(f"/api/kernel-jobs/{measured_job.pk}/variants/", {"batch": "\u00b2"})
    assert resp.status_code == 400 and "batch" in resp.json()
    resp = viewer_api.get("/api/kernel-whatif/", {"sweep": "\u00b2", "speedup": 3})
    assert resp.status_code == 400 and "sweep" in resp.json()
    resp = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "best": "\u00b2"})
    assert resp.status_code == 400 and "best" in resp.json()


def test_job_creation_keeps_the_shapes_in_the_order_given_and_refuses_one_given_twice(
        operator_api, toy_package, h200_node, django_capture_on_commit_callbacks):
    twice = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "h200-box",
                                                    "shapes": ["wide", "small", "wide"], "batches": [4, 1, 4]},
                              format="json")
    assert twice.status_code == 400 and twice.json() == {
        "shapes": ["shape 'wide' is given twice: give each once"], "batches": ["batch 4 is given twice: give each once"]}
    with django_capture_on_commit_callbacks(execute=False):
        resp = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "h200-box",
                                                       "shapes": ["wide", "small"], "batches": [4, 1]},
                                 format="json")
    assert resp.status_code == 201, resp.content
    assert resp.json()["shapes"] == ["wide", "small"] and resp.json()["batches"] == [1, 4]


def test_the_variant_table_of_an_unmeasured_job_offers_only_its_batches_and_shapes(viewer_api, toy_package,
                                                                                   h200_node):
    from kernels.services import kernel_job_create

    job = kernel_job_create(package=toy_package, node=h200_node, shapes=["wide"], batches=[4], dispatch=False)
    table = viewer_api.get(f"/api/kernel-jobs/{job.pk}/variants/").json()
    assert table["batches"] == [4] and table["batch"] == 4 and table["shapes"] == ["wide"]
    resp = viewer_api.get(f"/api/kernel-jobs/{job.pk}/variants/", {"batch": 1})
    assert resp.status_code == 400 and resp.json()["batch"] == ["1 is not a batch of this job; batches: 4"]
    roofline = viewer_api.get(f"/api/kernel-jobs/{job.pk}/chart/?shape=wide").json()
    assert roofline["batches"] == [4]
    # a job that selected none shows every batch the manifest declares
    every = kernel_job_create(package=toy_package, node=h200_node, dispatch=False)
    assert viewer_api.get(f"/api/kernel-jobs/{every.pk}/variants/").json()["batches"] == [1, 4]


def test_the_schema_documents_cancels_400_404_and_409(viewer_api):
    schema = viewer_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    responses = schema["paths"]["/api/kernel-jobs/{id}/cancel/"]["post"]["responses"]

    assert set(responses) == {"200", "400", "401", "403", "404", "409"}
    assert responses["409"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Detail"}
