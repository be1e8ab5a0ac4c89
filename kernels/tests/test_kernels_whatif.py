"""The what-if projection (kernels.whatif): a kernel taking a share of the decode step made
faster, projected onto a measured sweep; numbers checked against hand computations from the sim
profile's formulas and from a ceiling-analysis fit."""
import html

import pytest
from django.test import Client

from benchmarks.analysis import ANALYSIS_VERSION
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from controlplane.errors import InvalidInput
from kernels.whatif import SHARE_RANGE, SPEEDUP_RANGE, decode_factor, range_refusal, whatif_compute

SEED = "seed-sm120-fallback"


def _sweep(*, engine="sim", topology="pd", points, analysis=None, profile=SEED):
    sweep = BenchmarkSweep.objects.create(name="t", engine=engine, topology=topology, status="done",
                                          snapshot={"spec": {"sim": {"profile": profile}}} if engine == "sim" else {},
                                          analysis=analysis or {})
    for i, (c, tok, tpot_ms, ttft_ms) in enumerate(points):
        BenchmarkRun.objects.create(sweep=sweep, ordinal=i, status="done", concurrency=c, input_len=256,
                                    output_len=256, num_requests=4 * c, summary={
                                        "output_throughput_tok_s": tok, "ttft_ms": {"mean": ttft_ms},
                                        "tpot_ms": {"mean": tpot_ms}, "successes": 4 * c, "failures": 0})
    return sweep


def test_the_decode_factor_is_amdahls_law_on_one_step():
    assert decode_factor(share=0.63, speedup=3.0) == pytest.approx(0.37 + 0.21)
    assert decode_factor(share=1.0, speedup=4.0) == pytest.approx(0.25)
    with pytest.raises(InvalidInput) as err:
        decode_factor(share=1.5, speedup=0)
    assert set(err.value.errors) == {"share", "speedup"}


BAD_SPEEDUPS = ("-3", "0", "-0.0", "1001", "nan", "inf", "1e-320", "1e-300", "0.0009")
BAD_SHARES = ("-1", "0", "1.5", "nan")
# how a refusal writes the number float(raw) when no query text is at hand (as JSON writes it)
SHOWN = {"-0.0": "0", "1e-320": "1e-320", "1001": "1001", "nan": "NaN", "inf": "Infinity"}


def test_an_out_of_range_share_or_speedup_gets_one_message_whatever_the_value():
    assert SPEEDUP_RANGE.startswith("must be a number in [0.001, 1000]: how many times faster the kernel becomes")
    assert SHARE_RANGE.startswith("must be a fraction in (0, 1]: the part of the decode step time the kernel takes")
    for raw in BAD_SPEEDUPS:
        with pytest.raises(InvalidInput) as err:
            decode_factor(share=0.63, speedup=float(raw))
        assert err.value.errors == {"speedup": [f"{SPEEDUP_RANGE}, got {SHOWN.get(raw, raw)}"]}, raw
    for raw in BAD_SHARES:
        with pytest.raises(InvalidInput) as err:
            decode_factor(share=float(raw), speedup=2.0)
        assert err.value.errors == {"share": [f"{SHARE_RANGE}, got {SHOWN.get(raw, raw)}"]}, raw
    assert decode_factor(share=1.0, speedup=1000.0) == pytest.approx(0.001)  # both ends included
    assert decode_factor(share=1.0, speedup=0.001) == pytest.approx(1000.0)


def test_the_api_and_the_page_refuse_an_out_of_range_value_with_that_message(viewer_api, viewer, seed_pd_sweep):
    sweep = seed_pd_sweep
    page = Client()
    page.force_login(viewer)
    for raw in BAD_SPEEDUPS:
        resp = viewer_api.get("/api/kernel-whatif/", {"sweep": sweep.pk, "speedup": raw})
        said = f"'{raw}' is not a finite number" if raw in ("nan", "inf") else range_refusal("speedup", raw)
        assert resp.status_code == 400 and resp.json() == {"speedup": [said]}, raw
        if raw not in ("nan", "inf"):  # the page says those are not finite numbers before any range
            body = page.get(f"/kernels/whatif/?sweep={sweep.pk}&speedup={raw}").content.decode()
            assert html.escape(range_refusal("speedup", raw)) in body and "Output, measured → projected (tok/s)" not in body, raw
    for raw in BAD_SHARES:
        resp = viewer_api.get("/api/kernel-whatif/", {"sweep": sweep.pk, "share": raw, "speedup": 2})
        said = f"'{raw}' is not a finite number" if raw == "nan" else range_refusal("share", raw)
        assert resp.status_code == 400 and resp.json() == {"share": [said]}, raw
        if raw != "nan":
            body = page.get(f"/kernels/whatif/?sweep={sweep.pk}&share={raw}&speedup=2").content.decode()
            assert html.escape(range_refusal("share", raw)) in body and "Output, measured → projected (tok/s)" not in body, raw
    # both at once, and next to another problem of the form
    body = page.get("/kernels/whatif/?sweep=999999&share=0&speedup=-3").content.decode()
    assert html.escape(f"{SHARE_RANGE}, got 0") in body and html.escape(f"{SPEEDUP_RANGE}, got -3") in body
    assert "No sweep with id" in body
    # the reported cases: the value as the query wrote it
    assert viewer_api.get("/api/kernel-whatif/?sweep=1&share=0&speedup=3").json()["share"] == [
        f"{SHARE_RANGE}, got 0"]
    assert viewer_api.get(f"/api/kernel-whatif/?sweep={sweep.pk}&speedup=1e9").json() == {
        "speedup": [f"{SPEEDUP_RANGE}, got 1e9"]}
    body = page.get(f"/kernels/whatif/?sweep={sweep.pk}&speedup=1e9").content.decode()
    assert html.escape(f"{SPEEDUP_RANGE}, got 1e9") in body
    assert viewer_api.get("/api/kernel-whatif/", {"sweep": sweep.pk, "share": 1, "speedup": 1000}).status_code == 200


def test_the_api_and_the_page_refuse_an_unknown_key_instead_of_projecting_with_the_default(viewer_api, viewer,
                                                                                         seed_pd_sweep):
    # "shares" for "share": ignored, the projection would use the default 0.63 as if asked for
    unknown = "unknown field 'shares'; allowed: sweep, share, speedup, best"
    resp = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "speedup": 2, "shares": 0.5})
    assert resp.status_code == 400
    assert resp.json() == {"shares": [unknown + ", format"]}
    resp = viewer_api.get("/api/kernel-whatif/", {"shares": 0.5, "speedup": 2})   # with the other problems
    assert resp.status_code == 400
    assert resp.json() == {"sweep": ["This field is required."], "shares": [unknown + ", format"]}
    page = Client()
    page.force_login(viewer)
    answer = page.get("/kernels/whatif/", {"sweep": seed_pd_sweep.pk, "speedup": 2, "shares": 0.5})
    body = answer.content.decode()
    assert answer.status_code == 400
    assert html.escape(unknown) in body and "Output, measured → projected (tok/s)" not in body
    # spelt as the form spells it, the share is taken; DRF's format key is one the API takes
    resp = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "speedup": 2, "share": 0.5,
                                                  "format": "json"})
    assert resp.status_code == 200 and (resp.json()["share"], resp.json()["share_source"]) == (0.5, "given")
    assert page.get("/kernels/whatif/", {"sweep": seed_pd_sweep.pk, "speedup": 2, "share": 0.5}).status_code == 200
    # a format the endpoint does not answer in is named with the two it does, not a bare 404
    resp = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "speedup": 2, "format": "csv"})
    assert resp.status_code == 400 and resp.json() == {"format": ["must be one of json, api; got 'csv'"]}
    # the list endpoints refuse a key they do not take alike
    resp = viewer_api.get("/api/kernel-best/", {"shares": 0.5})
    assert resp.status_code == 400 and resp.json() == {
        "shares": ["unknown field 'shares'; allowed: package, device, shape, batch, limit, offset, format"]}


def test_it_projects_a_sim_sweep_from_the_profiles_formulas(db):
    # The seed's PD c=1 row: 9.95 tok/s, TPOT 94 ms, TTFT 893 ms; 256 in / 256 out.
    sweep = _sweep(points=[(1, 9.95, 94.0, 893.0), (8, 24.5, 282.0, 2000.0)])
    out = whatif_compute(sweep=sweep, share=0.63, speedup=3.0)
    assert out["model"] == "sim-profile" and out["profile"] == SEED and out["factor"] == pytest.approx(0.58)
    c1, c8 = out["lengths"]["256/256"]
    # By hand from seed-sm120-fallback.json: kv = 256 + 128 = 384 tokens; b = 1
    step = 0.0632 + 0.0306 * 1 + 7e-07 * 1 * 384                  # 0.0940688 s
    prefill = 0.607 + 0.000347 * 256                               # 0.695832 s
    transfer = 0.0017 + 256 * 70272 / 177600000.0                  # 0.1029930 s
    ttft, ttft_fast = prefill + transfer + step, prefill + transfer + 0.58 * step
    tok = 1 * 256 / (ttft + 255 * step)
    tok_fast = 1 * 256 / (ttft_fast + 255 * 0.58 * step)
    assert c1["model_tpot_ms"] == pytest.approx(step * 1e3) and c1["model_fast_tpot_ms"] == pytest.approx(0.58 * step * 1e3)
    assert c1["model_tok_s"] == pytest.approx(tok) and c1["model_fast_tok_s"] == pytest.approx(tok_fast)
    assert c1["model_tok_s"] == pytest.approx(10.289, abs=1e-3)      # the profile reproduces the seed row
    assert c1["projected_tpot_ms"] == pytest.approx(94.0 * 0.58)
    assert c1["projected_tok_s"] == pytest.approx(9.95 * tok_fast / tok)
    assert c1["projected_tok_s"] == pytest.approx(16.77, abs=0.01)
    # c = 8: 8 x 384 = 3072 KV tokens fit the 5376-token cache, so all 8 run: b = 8
    step8 = 0.0632 + 0.0306 * 8 + 7e-07 * 8 * 384
    assert c8["running_batch"] == 8 and c8["model_tpot_ms"] == pytest.approx(step8 * 1e3)
    assert c8["projected_tpot_ms"] == pytest.approx(282.0 * 0.58)


def test_it_caps_the_running_batch_by_the_kv_capacity(db):
    sweep = _sweep(points=[(16, 25.0, 510.0, 8800.0)])
    row = whatif_compute(sweep=sweep, share=0.63, speedup=2.0)["lengths"]["256/256"][0]
    b = 5376 // 384                                                # 14 sequences fit; 16 take turns
    step = 0.0632 + 0.0306 * b + 7e-07 * b * 384
    assert row["running_batch"] == b
    assert row["model_tpot_ms"] == pytest.approx(step * 16 / b * 1e3)


def test_it_projects_other_engines_with_the_ceiling_fit(db):
    analysis = {"lengths": {"256/256": {"fit": {"possible": True, "fixed_ms": 50.0, "per_seq_ms": 10.0,
                                                "r_squared": 0.99, "labels": ["c=1", "c=4"],
                                                "running_batch": [1.0, 3.5]}}}, "version": ANALYSIS_VERSION}
    sweep = _sweep(engine="sglang", topology="single", analysis=analysis,
                   points=[(1, 16.0, 60.0, 150.0), (4, 44.0, 86.0, 200.0)])
    out = whatif_compute(sweep=sweep, share=0.63, speedup=2.0)
    f = 0.37 + 0.63 / 2
    assert out["model"] == "ceiling-fit" and out["fit"]["256/256"]["per_seq_ms"] == 10.0
    c1, c4 = out["lengths"]["256/256"]
    # c = 4 by hand: TPOT(3.5) = 50 + 10 * 3.5 = 85 ms; TTFT held at the measured 200 ms.
    tok = 4 * 256 / ((200 + 255 * 85) / 1e3)
    tok_fast = 4 * 256 / ((200 + 255 * 85 * f) / 1e3)
    assert c4["model_tpot_ms"] == pytest.approx(85.0) and c4["model_fast_tpot_ms"] == pytest.approx(85 * f)
    assert c4["projected_tpot_ms"] == pytest.approx(86.0 * f)
    assert c4["projected_tok_s"] == pytest.approx(44.0 * tok_fast / tok)
    assert c4["tok_s_gain"] == pytest.approx(tok_fast / tok)


def test_it_says_why_a_sweep_cannot_be_projected(db):
    with pytest.raises(InvalidInput, match="has no decode cost fit"):
        whatif_compute(sweep=_sweep(engine="vllm", points=[(1, 10.0, 90.0, 100.0)]), speedup=2.0)
    with pytest.raises(InvalidInput, match="unknown profile 'no-such-profile'"):
        whatif_compute(sweep=_sweep(points=[(1, 10.0, 90.0, 100.0)], profile="no-such-profile"), speedup=2.0)
    with pytest.raises(InvalidInput, match="no finished closed-loop run"):
        whatif_compute(sweep=_sweep(points=[]), speedup=2.0)


def test_it_projects_no_point_where_every_request_failed(db):
    sweep = _sweep(points=[(1, 0.0, 90.0, 100.0)])
    BenchmarkRun.objects.filter(sweep=sweep).update(summary={"output_throughput_tok_s": 0.0, "requests": 1,
                                                             "successes": 0, "failures": 1})
    with pytest.raises(InvalidInput, match="no finished closed-loop run with fixed lengths and a successful request"):
        whatif_compute(sweep=sweep, speedup=2.0)


def test_it_leaves_out_points_the_ceiling_analysis_leaves_out(db):
    # 3 of 4 requests failed at c=1 (the engine died under it): not a measurement to project from.
    sweep = _sweep(points=[(1, 4.06, 90.0, 100.0), (2, 18.0, 110.0, 120.0)])
    first = BenchmarkRun.objects.get(sweep=sweep, concurrency=1)
    first.summary = {**first.summary, "requests": 4, "successes": 1, "failures": 3}
    first.save()
    result = whatif_compute(sweep=sweep, speedup=2.0)
    assert [r["concurrency"] for r in result["lengths"]["256/256"]] == [2]
    assert result["notes"] == ["1 point(s) not projected: no successful request, or more than 10% of the "
                               "requests failed (c=1 256/256)"]


def test_a_number_float_alone_would_read_is_refused_as_not_a_number(viewer_api, viewer, seed_pd_sweep):
    """``float("1_000")`` is 1000.0 and ``float("١")`` is 1.0; a query takes ASCII decimals only."""
    page = Client()
    page.force_login(viewer)
    for raw in ("1_000", "\u0661", "2\u00b2", "0x10"):
        resp = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "speedup": raw})
        assert resp.status_code == 400 and resp.json() == {"speedup": [f"'{raw}' is not a number"]}, raw
        body = page.get("/kernels/whatif/", {"sweep": seed_pd_sweep.pk, "speedup": raw}).content.decode()
        assert html.escape(f"'{raw}' is not a number.") in body and "Output, measured → projected (tok/s)" not in body, raw
    resp = viewer_api.get("/api/kernel-whatif/", {"sweep": "1_0", "speedup": 2})
    assert resp.status_code == 400 and resp.json() == {"sweep": ["must be a whole number between 1 and 2147483647, got '1_0'"]}
    assert viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "speedup": "2.5e0"}).status_code == 200


def test_arriving_from_a_sweep_page_preselects_the_sweep_without_an_error(viewer, seed_pd_sweep):
    page = Client()
    page.force_login(viewer)
    body = page.get(f"/kernels/whatif/?sweep={seed_pd_sweep.pk}").content.decode()
    assert "path-errors" not in body and "Give a speedup (×) or choose a best variant to project this sweep." in body
    assert f'<option value="{seed_pd_sweep.pk}" selected>' in body
    # a form sent without a speedup is still told what is missing
    body = page.get(f"/kernels/whatif/?sweep={seed_pd_sweep.pk}&speedup=&best=").content.decode()
    assert "path-errors" in body and "Give a speedup (×) or choose a best variant." in body



@pytest.mark.parametrize("query, message", [
    ("sweep=&share=0.63&speedup=3&best=", "sweep is empty: choose a finished sweep to project."),
    ("sweep=", "sweep is empty: choose a finished sweep to project."),
    ("speedup=3", "Choose a finished sweep to project."),
])
def test_a_whatif_without_a_sweep_says_to_choose_one(viewer, seed_pd_sweep, query, message):
    page = Client()
    page.force_login(viewer)

    response = page.get(f"/kernels/whatif/?{query}")

    assert response.status_code == 400
    body = response.content.decode()
    assert f"<li><code>sweep</code>: {html.escape(message)}</li>" in body
    assert "3.000×" not in body


def test_the_bare_whatif_page_asks_for_nothing(viewer, seed_pd_sweep):
    page = Client()
    page.force_login(viewer)

    response = page.get("/kernels/whatif/")

    assert response.status_code == 200 and "path-errors" not in response.content.decode()

def test_the_kernel_jobs_list_refuses_a_status_that_can_match_nothing(viewer_api):
    resp = viewer_api.get("/api/kernel-jobs/", {"status": "bogus"})
    assert resp.status_code == 400
    assert resp.json() == {"status": ["must be one of pending, building, benchmarking, done, failed, cancelled; "
                                      "got 'bogus'"]}
    assert viewer_api.get("/api/kernel-jobs/", {"status": "done"}).status_code == 200
    resp = viewer_api.get("/api/kernel-whatif/", {"sweep": "99999999999999999999999", "speedup": 2})
    assert resp.status_code == 400 and "sweep" in resp.json()


def test_the_table_names_the_statistic_and_unit_of_every_measured_column(viewer, db):
    # c=8: mean TTFT 2400 ms, p50 2348 ms; the table shows the mean and says so.
    analysis = {"lengths": {"256/256": {"fit": {"possible": True, "fixed_ms": 50.0, "per_seq_ms": 10.0,
                                                "r_squared": 0.99, "labels": ["c=1", "c=8"],
                                                "running_batch": [1.0, 7.0]}}}, "version": ANALYSIS_VERSION}
    sweep = _sweep(engine="sglang", topology="single", analysis=analysis,
                   points=[(1, 16.0, 60.0, 150.0), (8, 60.0, 120.0, 2400.0)])
    run = BenchmarkRun.objects.get(sweep=sweep, concurrency=8)
    run.summary = {**run.summary, "ttft_ms": {"mean": 2400.0, "p50": 2348.0}}
    run.save()
    page = Client()
    page.force_login(viewer)
    body = page.get("/kernels/whatif/", {"sweep": sweep.pk, "speedup": 2}).content.decode()
    heads = [h for h in body.split("<thead>", 1)[1].split("</thead>", 1)[0].split("<th class=\"num\">")[1:]]
    assert [h.split("</th>", 1)[0] for h in heads] == [
        "Concurrency", "Output, measured → projected (tok/s)", "Gain in output (×)",
        "TPOT mean, measured → projected (ms)", "TTFT mean, measured (ms)",
        "Model output, as is → faster (tok/s)", "Prefill bound, output (tok/s)", "Model TPOT, as is → faster (ms)",
        "Running batch, model / ceiling analysis (sequences)"]
    assert '<td class="num">2400</td>' in body and "2348" not in body
    assert not any(n.startswith("no mean") for n in whatif_compute(sweep=sweep, speedup=2.0)["notes"])


def test_a_point_without_a_mean_is_named_where_its_p50_stands_in(db):
    sweep = _sweep(engine="sim", points=[(1, 9.95, 94.0, 893.0), (4, 30.0, 110.0, 950.0)])
    run = BenchmarkRun.objects.get(sweep=sweep, concurrency=4)
    run.summary = {**run.summary, "ttft_ms": {"p50": 940.0}}
    run.save()
    out = whatif_compute(sweep=sweep, speedup=2.0)
    assert out["lengths"]["256/256"][1]["measured_ttft_ms"] == 940.0
    assert ("no mean in the summary of c=4 256/256 (TTFT): the p50 stands in the mean column there, and the "
            "projection is calibrated on it") in out["notes"]


def test_a_sweep_that_is_no_id_is_named_so_on_the_page(viewer, seed_pd_sweep):
    page = Client()
    page.force_login(viewer)
    body = page.get("/kernels/whatif/?sweep=abc&speedup=2").content.decode()
    assert html.escape("'abc' is not a sweep id (a whole number).") in body and "No sweep with id" not in body
    body = page.get("/kernels/whatif/?sweep=999999&speedup=2").content.decode()
    assert "No sweep with id" in body
