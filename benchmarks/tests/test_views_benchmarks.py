"""Benchmark pages seen by each persona: the index with the import form, the sweep form, a sweep
with its live progress partial, results, charts and findings, a run with CDFs and the tok/s
timeline built from a real records file, the comparison view with its highlighted differences
and the refusal to rank a length-mismatched run (case C10), exports, and 404s for unknown ids.

Rows are written directly; the records file is a real :class:`RecordStore` saved under a
temporary ``VAR_DIR``."""
from __future__ import annotations

import hashlib
import json
import re
from array import array
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from benchmarks.analysis import ANALYSIS_VERSION
from benchmarks.choices import RunSource, RunStatus, SweepStatus
from benchmarks.loadgen.records import RecordStore, RequestOutcome
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.sweeps import results_table_rows
from deployments.choices import DeploymentStatus
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create
from benchmarks.tests.page_support import logged_in_client as _client, json_script as _json_script

DATA = Path(__file__).parent / "data"
MS = 1_000_000  # ns per ms
T0 = 50_000_000_000  # an arbitrary perf_counter_ns origin: records store absolute clock values


def _html(response) -> str:
    return response.content.decode()


@pytest.fixture
def viewer_client(viewer) -> Client:
    return _client(viewer)


@pytest.fixture
def operator_client(operator) -> Client:
    return _client(operator)


@pytest.fixture
def var_dir(settings, tmp_path) -> Path:
    settings.VAR_DIR = tmp_path
    (tmp_path / "benchmarks").mkdir()
    return tmp_path


@pytest.fixture
def deployment(db):
    node = cpu_node_create()
    node.agent_heartbeat_at = timezone.now()  # its agent online, as a ready deployment's is
    node.save(update_fields=["agent_heartbeat_at"])
    recipe = recipe_row_create(node=node, name="local-sim-single", spec={"sim": {"gpus_modelled": 4}})
    return deployment_row_create(recipe=recipe, status=DeploymentStatus.READY)


def _records_file(directory: Path) -> Path:
    """Four requests with known times: three succeed (TTFT 100, 200, 300 ms; E2E 200, 1300,
    500 ms), one fails with HTTP 500. Output events: 4 tokens in the first second of the run,
    4 in the second."""
    store = RecordStore()

    def ok(start_ms: int, events_ms: list[int], index: int) -> RequestOutcome:
        return RequestOutcome(
            scheduled=T0 + start_ms * MS, start=T0 + start_ms * MS, end=T0 + events_ms[-1] * MS + MS, index=index,
            events=array("q", [T0 + e * MS for e in events_ms]), event_tokens=array("H", [1] * len(events_ms)),
            output_tokens=len(events_ms), input_tokens=256, requested_input=256, requested_output=len(events_ms),
            http_status=200, ok=True, finish_reason="length",
        )

    store.add(ok(0, [100, 150, 200], 0))
    store.add(ok(0, [200, 1300], 1))
    store.add(ok(1000, [1300, 1400, 1500], 2))
    store.add(RequestOutcome(scheduled=T0 + 1000 * MS, start=T0 + 1000 * MS, end=T0 + 1010 * MS, index=3,
                             requested_input=256, requested_output=3, http_status=500,
                             error="HTTP 500: engine overloaded"))
    return store.save(directory / "benchmarks" / "run-test.npz")


def _summary(*, tok_s: float, ttft_p99_s: float, out_mean: float = 256.0, flags: dict | None = None) -> dict:
    """A run summary in the load generator's vocabulary (seconds, per-second rates)."""
    dist = {"mean": 0.2, "std": 0.08, "p50": 0.2, "p90": 0.28, "p99": ttft_p99_s, "count": 3}
    return {
        "requests": 4, "successes": 3, "failures": 1, "duration_s": 1.51,
        "output_throughput_tok_s": tok_s, "request_throughput_req_s": 1.987,
        "ttft_s": dist, "tpot_s": {"mean": 0.05, "std": 0.0, "p50": 0.05, "p90": 0.05, "p99": 0.05, "count": 3},
        "e2e_s": dist, "itl_s": {"mean": 0.05, "std": 0.0, "p50": 0.05, "p90": 0.05, "p99": 0.05, "count": 4},
        "output_tokens_mean": out_mean, "output_length_requested": 256,
        "flags": flags or {}, "errors": {"HTTP 500: engine overloaded": 1},
    }


def _enough_requests(*runs: BenchmarkRun) -> None:
    """Give ``runs`` 10 successful requests (and the 1 failure they had): the fewest a comparison
    names a best from (MIN_COMPARED_REQUESTS); the fixtures' 3 are too few to judge."""
    for run in runs:
        run.refresh_from_db()
        BenchmarkRun.objects.filter(pk=run.pk).update(summary={**run.summary, "requests": 11, "successes": 10})


@pytest.fixture
def sweep(deployment, var_dir) -> BenchmarkSweep:
    """A running sweep, 12 of 48 requests done, with one finished point whose records exist."""
    sweep = BenchmarkSweep.objects.create(
        deployment=deployment, name="local-sim-single c=1,8", status=SweepStatus.RUNNING,
        grid={"concurrency": [1, 8], "lengths": [[256, 256]], "requests": 24},
        points_total=2, points_done=1, requests_total=48, requests_done=12, current_tok_s=187.26,
        current_point="c=8 256/256", num_gpus=4, served_model_name="local-sim-single", topology="single",
        engine="sim", snapshot={"recipe_version": 3, "argv": ["python", "-m", "deployments.engines.sim_server",
                                                              "--api-key", "hf_PastedIntoAnArgvByMistake42"]},
    )
    BenchmarkRun.objects.create(
        sweep=sweep, ordinal=0, status=RunStatus.DONE, concurrency=1, input_len=256, output_len=256,
        num_requests=4, num_gpus=4, summary=_summary(tok_s=123.4, ttft_p99_s=0.298),
        records_path=str(_records_file(var_dir)), output_tok_s=123.4,
    )
    return sweep


@pytest.fixture
def mismatch_sweep(deployment) -> tuple[BenchmarkRun, BenchmarkRun]:
    """Two finished runs at 256/256: c=1 clean, c=8 with an output length mismatch (mean 241.5)."""
    sweep = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.DONE, points_total=2,
                                          points_done=2, num_gpus=4)
    clean = BenchmarkRun.objects.create(
        sweep=sweep, ordinal=0, status=RunStatus.DONE, concurrency=1, input_len=256, output_len=256, num_requests=4,
        num_gpus=4, summary=_summary(tok_s=100.0, ttft_p99_s=0.1),
    )
    short = BenchmarkRun.objects.create(
        sweep=sweep, ordinal=1, status=RunStatus.DONE, concurrency=8, input_len=256, output_len=256,
        num_requests=32, num_gpus=4, flags=["output_length_mismatch"],
        summary=_summary(tok_s=400.0, ttft_p99_s=0.4, out_mean=241.5, flags={"output_length_mismatch": True}),
    )
    return clean, short


# --- access -----------------------------------------------------------------------------------


def test_it_renders_every_page_for_a_viewer(viewer_client, sweep, mismatch_sweep):
    run = sweep.runs.get()
    clean, short = mismatch_sweep
    urls = [
        reverse("benchmarks:index"),
        reverse("benchmarks:sweep-detail", args=[sweep.pk]),
        reverse("benchmarks:sweep-progress", args=[sweep.pk]),
        reverse("benchmarks:sweep-results", args=[sweep.pk]),
        reverse("benchmarks:run-detail", args=[run.pk]),
        reverse("benchmarks:compare") + f"?runs={clean.pk},{short.pk}&sweeps={sweep.pk}",
        reverse("benchmarks:run-export", args=[run.pk, "csv"]),
        reverse("benchmarks:sweep-export", args=[sweep.pk, "json"]),
    ]
    for url in urls:
        assert viewer_client.get(url).status_code == 200, url


def test_it_refuses_operator_actions_to_a_viewer(viewer_client, sweep, deployment):
    create = reverse("benchmarks:sweep-create") + f"?deployment={deployment.pk}"
    assert viewer_client.get(create).status_code == 403
    assert viewer_client.post(reverse("benchmarks:sweep-create"),
                              {"deployment": deployment.pk, "concurrency": "1", "lengths": "8:8"}).status_code == 403
    assert viewer_client.post(reverse("benchmarks:sweep-cancel", args=[sweep.pk])).status_code == 403
    upload = SimpleUploadedFile("vllm.json", (DATA / "vllm-bench-serve.json").read_bytes())
    assert viewer_client.post(reverse("benchmarks:run-import"), {"file": upload}).status_code == 403
    sweep.refresh_from_db()
    assert sweep.cancel_requested is False
    assert BenchmarkSweep.objects.count() == 1
    assert not BenchmarkRun.objects.filter(source=RunSource.IMPORTED).exists()
    page = _html(viewer_client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])))
    assert "Cancel sweep" not in page


def test_it_sends_anonymous_visitors_to_login(client, sweep):
    response = client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk]))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_it_answers_404_for_unknown_ids_and_400_for_unknown_formats(viewer_client, operator_client, sweep):
    run = sweep.runs.get()
    for url in (
        reverse("benchmarks:sweep-detail", args=[9999]),
        reverse("benchmarks:sweep-progress", args=[9999]),
        reverse("benchmarks:run-detail", args=[9999]),
        reverse("benchmarks:run-export", args=[9999, "csv"]),
        reverse("benchmarks:run-original", args=[run.pk]),  # measured, nothing was imported
    ):
        assert viewer_client.get(url).status_code == 404, url
    assert viewer_client.get(reverse("benchmarks:run-export", args=[run.pk, "xml"])).status_code == 400
    # a comparison's ids are input, not a page: one that names no row is a 400 with the form
    for query, said in ((f"?runs={run.pk},9999", "No run with id 9999."), ("?sweeps=4242", "No sweep with id 4242."),
                        ("?runs=1;drop", "Runs must be comma-separated integer ids")):
        response = viewer_client.get(reverse("benchmarks:compare") + query)
        assert response.status_code == 400 and said in response.content.decode(), query
    assert operator_client.get(reverse("benchmarks:sweep-create") + "?deployment=9999").status_code == 404
    assert operator_client.post(reverse("benchmarks:sweep-cancel", args=[9999])).status_code == 404


def test_it_answers_400_for_ids_too_large_for_the_database(viewer_client, sweep):
    # 2**63 overflows SQLite's INTEGER: no row has such an id, so the page says so, never a 500
    run = sweep.runs.get()
    for query, said in ((f"?runs={run.pk},9223372036854775808", "No run with id 9223372036854775808."),
                        ("?sweeps=99999999999999999999999", "No sweep with id 99999999999999999999999."),
                        (f"?run={run.pk}&run=000009223372036854775808", "No run with id 9223372036854775808."),
                        ("?ids=" + "9" * 5000, "Ids must be comma-separated integer ids"),
                        (f"?runs={run.pk},0009223372036854775807", "No run with id 9223372036854775807.")):
        response = viewer_client.get(reverse("benchmarks:compare") + query)
        assert response.status_code == 400 and said in response.content.decode(), query[:40]


# --- sweep page -------------------------------------------------------------------------------


def test_it_links_an_ended_sweep_to_its_what_if_projection_only_where_it_can_be_made(viewer_client, sweep):
    whatif = f'href="{reverse("kernels:whatif")}?sweep={sweep.pk}"'
    # Running: the link is rendered hidden, for the live progress to reveal when the sweep ends.
    assert f"{whatif} data-whatif-link hidden>" in _html(viewer_client.get(reverse("benchmarks:sweep-detail",
                                                                                    args=[sweep.pk])))
    # This sweep's one point has no successful request: the what-if page refuses it at once...
    answer = viewer_client.get(f"{reverse('kernels:whatif')}?sweep={sweep.pk}")
    assert answer.status_code == 400
    why = f"sweep #{sweep.pk} has no finished closed-loop run with fixed lengths and a successful request"
    for status in (SweepStatus.DONE, SweepStatus.CANCELLED, SweepStatus.FAILED):
        BenchmarkSweep.objects.filter(pk=sweep.pk).update(status=status)
        answer = viewer_client.get(f"{reverse('kernels:whatif')}?sweep={sweep.pk}")
        assert answer.status_code == 400
        assert re.findall(r"<li><code>.*?</li>", _html(answer)) == [f"<li><code>sweep</code>: {why}</li>"]
        # ...so the sweep page offers no link to that refusal, and says why instead
        page = _html(viewer_client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])))
        assert whatif not in page and "data-whatif-link" not in page, status
        assert f"What-if not available: {why}" in page
        # and the progress partial, reloaded when the sweep ends, sends the same out of band
        partial = _html(viewer_client.get(reverse("benchmarks:sweep-progress", args=[sweep.pk])))
        assert '<span id="sweep-whatif" hx-swap-oob="true">' in partial
        assert f"What-if not available: {why}" in partial and whatif not in partial


def test_it_shows_live_progress_and_polls_every_second_while_running(viewer_client, sweep):
    response = viewer_client.get(reverse("benchmarks:sweep-progress", args=[sweep.pk]), {"points": "1"})
    html = _html(response)
    assert "12 / 48 requests" in html
    assert "1 / 2 points" in html
    current = html.split('class="current-tok-s">')[1].split("</dd>")[0]
    assert current.startswith("187.3 output tok/s, last 0.5 s window")   # the window's rate, named as such
    assert "at c=8 256/256" in html
    assert 'hx-trigger="every 1s"' in html
    assert 'style="width: 25.0%"' in html
    # the page already shows the one finished point: no reload of the results
    assert "HX-Trigger" not in response


def test_it_reloads_results_when_a_point_finishes_and_stops_polling_when_done(viewer_client, sweep):
    stale = viewer_client.get(reverse("benchmarks:sweep-progress", args=[sweep.pk]), {"points": "0"})
    assert stale["HX-Trigger"] == "sweep-points-changed"
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(status=SweepStatus.DONE, points_done=2, requests_done=48)
    done = viewer_client.get(reverse("benchmarks:sweep-progress", args=[sweep.pk]), {"points": "2"})
    html = _html(done)
    assert "48 / 48 requests" in html
    assert "every 1s" not in html
    assert done["HX-Trigger"] == "sweep-points-changed"
    assert "—" in html.split("Current output")[1][:120]  # nothing running: no tok/s, not 0


def test_it_shows_results_with_units_charts_findings_and_snapshot(viewer_client, sweep):
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(analysis={
        "findings": ["Throughput stops growing at c=8: 412 tok/s (103 tok/s per GPU)."], "errors": {}, "notes": [],
        "version": ANALYSIS_VERSION})
    html = _html(viewer_client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])))
    assert "Throughput stops growing at c=8: 412 tok/s (103 tok/s per GPU)." in html
    for header in ("Output (tok/s)", "Per GPU (tok/s)", "Requests (req/s)", "Goodput (req/s)", "TTFT (ms)",
                   "TPOT (ms)", "ITL (ms)", "E2E (ms)", "Failures (requests)"):
        # the unit is a span of its own (a second header line): the header's text reads whole
        assert header in re.sub(r"<[^>]+>", "", html), header
    assert "123.4" in html  # output tok/s
    assert "30.85" in html  # 123.4 tok/s over 4 GPUs
    assert "298.0" in html  # TTFT p99 0.298 s in ms
    assert "1 × HTTP 500: engine overloaded" in html
    # no SLO was given: goodput is unavailable, not zero
    row = html.split('id="run-')[1].split("</tr>")[0]
    assert "<td class=\"num\">—</td>" in row
    chart = _json_script(html, "chart-sweep-tok-s")
    assert chart["x"] == {"label": "concurrency", "unit": "requests", "log": True}
    assert chart["y"]["unit"] == "tok/s"
    assert chart["series"] == [{"label": "256/256", "points": [[1.0, 123.4]]}]
    ttft = _json_script(html, "chart-sweep-ttft")
    assert [s["label"] for s in ttft["series"]] == ["256/256 p50", "256/256 p90", "256/256 p99"]
    assert ttft["series"][2]["points"] == [[1.0, pytest.approx(298.0)]]
    assert "deployments.engines.sim_server" in html  # snapshot argv, collapsed
    assert "hf_PastedIntoAnArgvByMistake42" not in html
    assert "***redacted***" in html
    assert reverse("benchmarks:sweep-export", args=[sweep.pk, "csv"]) in html


def test_it_cancels_a_running_sweep_for_an_operator(operator_client, sweep):
    page = _html(operator_client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])))
    assert "Cancel sweep" in page
    response = operator_client.post(reverse("benchmarks:sweep-cancel", args=[sweep.pk]))
    assert response.status_code == 302
    sweep.refresh_from_db()
    assert sweep.cancel_requested is True
    html = _html(operator_client.get(reverse("benchmarks:sweep-progress", args=[sweep.pk])))
    assert "cancel requested" in html


def test_it_exports_the_sweep_as_csv_and_json(viewer_client, sweep):
    csv_response = viewer_client.get(reverse("benchmarks:sweep-export", args=[sweep.pk, "csv"]))
    assert csv_response["Content-Disposition"] == f'attachment; filename="sweep-{sweep.pk}.csv"'
    header, row = csv_response.content.decode().splitlines()[:2]
    values = dict(zip(header.split(","), row.split(",")))
    assert values["output_throughput_tok_s"] == "123.4"
    assert values["goodput_req_s"] == ""
    body = json.loads(viewer_client.get(reverse("benchmarks:sweep-export", args=[sweep.pk, "json"])).content)
    assert body["sweep"]["id"] == sweep.pk
    assert body["runs"][0]["metrics"]["ttft_ms"]["p99"] == pytest.approx(298.0)


# --- sweep form -------------------------------------------------------------------------------


def test_it_creates_a_sweep_from_the_form(operator_client, operator, deployment):
    form = reverse("benchmarks:sweep-create") + f"?deployment={deployment.pk}"
    assert "Start sweep" in _html(operator_client.get(form))
    response = operator_client.post(reverse("benchmarks:sweep-create"), {
        "deployment": deployment.pk, "concurrency": "1, 8", "lengths": "256:256, 64:32", "requests": "8",
        "rates": "", "slo_ttft_ms": "500", "slo_tpot_ms": "", "slo_e2e_ms": "",
    })
    sweep = BenchmarkSweep.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("benchmarks:sweep-detail", args=[sweep.pk])
    assert sweep.grid["concurrency"] == [1, 8]
    assert sweep.grid["lengths"] == [[256, 256], [64, 32]]
    assert sweep.grid["requests"] == 8
    assert sweep.grid["slo"] == {"ttft_s": 0.5}
    assert (sweep.points_total, sweep.requests_total) == (4, 32)
    assert sweep.created_by == operator
    assert sweep.num_gpus == 4


def test_it_shows_form_errors_next_to_the_fields(operator_client, deployment):
    response = operator_client.post(reverse("benchmarks:sweep-create"), {
        "deployment": deployment.pk, "concurrency": "1,x", "lengths": "256", "requests": "-2",
    })
    assert response.status_code == 400
    html = _html(response)
    # the API's grid validation judges what was typed and says it in the API's words
    assert escape('must be an integer 1..4096, got the string "x"') in html
    assert escape('''must be [input_len, output_len] or 'in:out' with 1..1000000 tokens, got the string "256"''') in html
    assert escape("must be an integer 1..100000, got -2") in html
    assert not BenchmarkSweep.objects.exists()


def test_a_length_pair_with_a_zero_length_is_refused_as_the_api_refuses_it(operator_client, deployment):
    response = operator_client.post(reverse("benchmarks:sweep-create"), {
        "deployment": deployment.pk, "concurrency": "1", "lengths": "64:0, 0:16, 0:0", "requests": "2",
    })
    assert response.status_code == 400
    html = _html(response)
    for pair in ("64:0", "0:16", "0:0"):
        assert escape(f'''must be [input_len, output_len] or 'in:out' with 1..1000000 tokens, got the string "{pair}"''') in html
    assert not BenchmarkSweep.objects.exists()


def test_it_refuses_numbers_a_browser_would_silently_drop_with_a_message(operator_client, deployment):
    # A type="number" input turns 1e400 into "" in the browser, which reads as "not given": the
    # form uses text inputs, so the server sees what was typed and refuses it by name.
    form = _html(operator_client.get(reverse("benchmarks:sweep-create") + f"?deployment={deployment.pk}"))
    assert 'type="number"' not in form
    assert 'name="slo_ttft_ms"' in form and 'inputmode="decimal"' in form and 'name="duration"' in form
    response = operator_client.post(reverse("benchmarks:sweep-create"), {
        "deployment": deployment.pk, "concurrency": "1", "lengths": "8:8", "slo_ttft_ms": "1e400",
        "slo_tpot_ms": "nan", "slo_e2e_ms": "-5", "rates": "inf", "duration": "90000",
    })
    assert response.status_code == 400
    html = _html(response)
    errors = response.context["errors"]
    # each refused in the API's words, as it refuses the same values in a JSON body; an SLO number
    # at or below zero in the ms its field takes
    assert errors["slo_ttft_ms"] == ["must be a finite number, got 1e400 (too large for a 64-bit float)"]
    assert errors["slo_tpot_ms"] == ["must be a finite number, got nan (not a number)"]
    assert errors["slo_e2e_ms"] == ["must be more than 0 ms, got -5 ms"]
    assert errors["rates"] == ["item 1: must be a finite number, got inf (infinite)"]
    assert errors["duration"] == ["must be at least 1 s and at most 86400 s (24 h), got 90000"]
    assert 'value="1e400"' in html  # the form comes back with what was typed
    assert not BenchmarkSweep.objects.exists()


def test_it_creates_a_time_limited_sweep_from_the_form(operator_client, deployment):
    response = operator_client.post(reverse("benchmarks:sweep-create"), {
        "deployment": deployment.pk, "concurrency": "2", "lengths": "16:8", "requests": "", "duration": "2.5",
    })
    assert response.status_code == 302
    sweep = BenchmarkSweep.objects.get()
    assert sweep.grid["duration_s"] == 2.5 and sweep.grid["requests"] is None
    assert sweep.grid["requests_per_concurrency"] is None
    # how many requests fit in 2.5 s is not known in advance: the total grows as points run
    assert sweep.requests_total == 0
    page = _html(operator_client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])))
    assert "2.5 s per point" in page
    both = operator_client.post(reverse("benchmarks:sweep-create"), {
        "deployment": deployment.pk, "concurrency": "1", "lengths": "16:8", "requests": "3", "duration": "60",
    })
    assert both.status_code == 409  # one sweep at a time on a deployment, as the API answers it
    assert f"sweep #{sweep.pk} is already" in _html(both)
    sweep.status = SweepStatus.DONE
    sweep.save()
    both = operator_client.post(reverse("benchmarks:sweep-create"), {
        "deployment": deployment.pk, "concurrency": "1", "lengths": "16:8", "requests": "3", "duration": "60",
    })
    second = BenchmarkSweep.objects.exclude(pk=sweep.pk).get()
    assert both.status_code == 302 and (second.grid["requests"], second.grid["duration_s"]) == (3, 60.0)
    assert "60 s per point or its requests, whichever ends first" in _html(
        operator_client.get(reverse("benchmarks:sweep-detail", args=[second.pk])))


def test_it_refuses_to_sweep_a_stopped_deployment(operator_client, deployment):
    deployment.status = DeploymentStatus.STOPPED
    deployment.save()
    response = operator_client.post(reverse("benchmarks:sweep-create"),
                                    {"deployment": deployment.pk, "concurrency": "1", "lengths": "8:8"})
    assert response.status_code == 409   # the deployment's state, as the API answers it
    assert f"deployment #{deployment.pk} is stopped" in _html(response)


def test_it_offers_a_sweep_on_a_ready_deployment_page_to_operators_only(operator_client, viewer_client, deployment):
    from deployments.models import Node

    url = reverse("deployments:deployment-detail", args=[deployment.pk])
    button = reverse("benchmarks:sweep-create") + f"?deployment={deployment.pk}"
    # Not while the node agent is offline (ready is then only as last seen) ...
    Node.objects.filter(pk=deployment.node_id).update(agent_heartbeat_at=None)
    assert button not in _html(operator_client.get(url))
    # ... and once it heartbeats, to operators only.
    Node.objects.filter(pk=deployment.node_id).update(agent_heartbeat_at=timezone.now())
    assert button in _html(operator_client.get(url))
    assert button not in _html(viewer_client.get(url))
    assert 'href="/benchmarks/"' in _html(viewer_client.get(url))  # the nav item


# --- run page ---------------------------------------------------------------------------------


def test_it_draws_cdfs_and_the_timeline_from_the_raw_records(viewer_client, sweep):
    run = sweep.runs.get()
    html = _html(viewer_client.get(reverse("benchmarks:run-detail", args=[run.pk])))
    ttft = _json_script(html, "chart-cdf-ttft")
    assert ttft["x"] == {"label": "TTFT", "unit": "ms", "log": False}
    assert ttft["series"][0]["points"] == [[100.0, 0.333333], [200.0, 0.666667], [300.0, 1.0]]
    e2e = _json_script(html, "chart-cdf-e2e")["series"][0]["points"]
    assert e2e == [[200.0, 0.333333], [500.0, 0.666667], [1300.0, 1.0]]
    # TPOT = (E2E - TTFT) / (tokens - 1): 50, 1100, 100 ms
    assert [p[0] for p in _json_script(html, "chart-cdf-tpot")["series"][0]["points"]] == [50.0, 100.0, 1100.0]
    # ITL gaps of the successful requests: 50, 50, 1100, 100, 100 ms
    itl = _json_script(html, "chart-cdf-itl")["series"][0]["points"]
    assert [p[0] for p in itl] == [50.0, 50.0, 100.0, 100.0, 1100.0]
    timeline = _json_script(html, "chart-timeline")
    # the run lasts 1.501 s (first start to last end): the last bucket's 4 tokens came in 0.501 s
    assert timeline["series"][0]["points"] == [[0.0, 4.0], [1.0, pytest.approx(4 / 0.501)]]
    assert timeline["y"]["unit"] == "tok/s"
    assert "HTTP 500: engine overloaded" in html
    assert 'data-chart="chart-cdf-ttft"' in html
    assert "vendor/uplot/uPlot.iife.min.js" in html


def test_it_says_when_the_records_file_is_gone(viewer_client, sweep):
    run = sweep.runs.get()
    Path(run.records_path).unlink()
    html = _html(viewer_client.get(reverse("benchmarks:run-detail", args=[run.pk])))
    assert "records file of this run is missing" in html
    assert _json_script(html, "chart-cdf-ttft")["series"][0]["points"] == []
    assert "<td class=\"num\">123.4</td>" in html  # the stored summary is still shown, as the results table prints it


def test_it_marks_a_length_mismatch_with_the_measured_mean(viewer_client, mismatch_sweep):
    _, short = mismatch_sweep
    html = _html(viewer_client.get(reverse("benchmarks:run-detail", args=[short.pk])))
    assert "Output length mismatch: measured mean 241.5 tokens per request vs 256 requested" in html


# --- comparison -------------------------------------------------------------------------------


def test_it_compares_runs_highlighting_differences_and_refusing_to_rank_a_mismatch(viewer_client, mismatch_sweep):
    clean, short = mismatch_sweep
    html = _html(viewer_client.get(reverse("benchmarks:compare"), {"runs": f"{clean.pk},{short.pk}"}))
    assert re.search(r'<tr class="config differs"><td>concurrency <span class="tag warn small">differs</span></td>'
                     r'<td class="num mono small">1</td><td class="num mono small">8</td>', html)
    assert '<tr class="config"><td>input_len</td>' in html  # same lengths: not highlighted
    assert f"Run #{short.pk} is not ranked: output_length_mismatch" in html
    assert "not ranked</div>" in html
    # the mismatched run has 4x the tok/s but is not crowned; the only rankable run is, and the page says so
    assert re.search(r'<td>output throughput \(tok/s\)</td><td class="num best">100.0</td>'
                     r'<td class="num">400.0</td>', html)
    assert f"Run #{clean.pk} is the only rankable run: it is named best with no other run to rank it against" in html
    assert "measured mean 241.5 tokens" in html
    tok = _json_script(html, "chart-compare-tok-s")
    assert tok["series"] == [{"label": f"sweep #{clean.sweep_id} 256/256", "points": [[1.0, 100.0], [8.0, 400.0]]}]


def test_it_ranks_comparable_runs_and_overlays_cdfs_of_a_sweep(viewer_client, sweep, mismatch_sweep):
    clean, _ = mismatch_sweep
    run = sweep.runs.get()
    _enough_requests(clean, run)
    html = _html(viewer_client.get(reverse("benchmarks:compare"), {"runs": str(clean.pk), "sweeps": str(sweep.pk)}))
    # output tok/s: 123.4 (sweep run) beats 100.0
    assert re.search(r'<td>output throughput \(tok/s\)</td>'
                     r'<td class="num">100.0</td><td class="num best">123.4</td>', html)
    cdf = _json_script(html, "chart-compare-ttft-cdf")
    assert cdf["series"] == [{"label": f"run #{run.pk} {run.label}", "step": True,
                              "points": [[100.0, 0.333333], [200.0, 0.666667], [300.0, 1.0]]}]


def test_it_takes_ids_as_an_alias_of_runs_like_the_api(viewer_client, mismatch_sweep):
    clean, short = mismatch_sweep
    html = _html(viewer_client.get(reverse("benchmarks:compare"), {"ids": f"{clean.pk},{short.pk}"}))
    assert "Choose runs or sweeps to compare." not in html
    assert f"Run #{short.pk} is not ranked: output_length_mismatch" in html
    assert f'name="runs" value="{clean.pk},{short.pk}"' in html
    # both names together name runs together; a run under both is given twice, refused as in one list
    both = _html(viewer_client.get(reverse("benchmarks:compare"), {"runs": str(clean.pk), "ids": str(short.pk)}))
    assert f'name="runs" value="{clean.pk},{short.pk}"' in both
    twice = viewer_client.get(reverse("benchmarks:compare"), {"runs": str(clean.pk), "ids": f"{short.pk},{clean.pk}"})
    assert twice.status_code == 400 and f"Repeated run id: {clean.pk} (2 times); give each once." in _html(twice)
    malformed = viewer_client.get(reverse("benchmarks:compare"), {"ids": "8;drop"})
    assert malformed.status_code == 400  # the form again with the reason, as the API's 400
    assert "Ids must be comma-separated integer ids, got &#x27;8;drop&#x27;." in _html(malformed)
    assert 'name="runs" value="8;drop"' in _html(malformed)
    other = clean.pk + short.pk + 1000   # an id that is neither (on PostgreSQL ids keep counting across tests)
    outside = viewer_client.get(reverse("benchmarks:compare"), {"runs": f"{clean.pk},{short.pk}", "baseline": str(other)})
    assert outside.status_code == 400 and f"Baseline run #{other} is not one of the compared runs." in _html(outside)


@pytest.mark.parametrize("name", ["ids", "runs", "sweeps", "baseline", "format"])
def test_it_refuses_a_parameter_given_twice_instead_of_taking_the_last(viewer_client, mismatch_sweep, name):
    clean, short = mismatch_sweep
    values = {"ids": [str(clean.pk), str(short.pk)], "runs": [str(clean.pk), str(short.pk)],
              "sweeps": [str(clean.sweep_id), str(clean.sweep_id)], "baseline": [str(clean.pk), str(short.pk)],
              "format": ["csv", "csv"]}[name]
    query = {"runs": f"{clean.pk},{short.pk}", name: values}

    response = viewer_client.get(reverse("benchmarks:compare"), query)

    assert response.status_code == 400  # the form again with the reason, as for malformed ids
    html = _html(response)
    assert f"The parameter {name} is given 2 times ({', '.join(values)}): give it once." in html
    assert "not ranked" not in html and not response.get("Content-Disposition")
    # ?ids=1&ids=2 compared run 2 alone; written as one list, both runs are compared
    one = viewer_client.get(reverse("benchmarks:compare"), {"ids": f"{clean.pk},{short.pk}"})
    assert one.status_code == 200 and f"Run #{short.pk} is not ranked" in _html(one)


def test_it_asks_for_a_second_run(viewer_client, mismatch_sweep):
    clean, _ = mismatch_sweep
    # The run page's "Compare…" link: the form with the run filled in and a hint, no error.
    link = re.search(r'href="([^"]*)">Compare…</a>', _html(viewer_client.get(reverse("benchmarks:run-detail",
                                                                                      args=[clean.pk]))))
    response = viewer_client.get(link.group(1))
    html = _html(response)
    assert response.status_code == 200 and 'role="alert"' not in html
    assert f'name="runs" value="{clean.pk}"' in html
    assert f"Add at least one more run or a sweep to compare run #{clean.pk} with." in html
    # The same one run sent by the form is the API's 400, the form kept.
    response = viewer_client.get(reverse("benchmarks:compare"), {"runs": str(clean.pk), "compare": "1"})
    assert response.status_code == 400 and f"Only run {clean.pk} was given; give at least two runs to compare." in _html(response)
    assert f'name="runs" value="{clean.pk}"' in _html(response)


def test_one_run_ticked_on_the_index_keeps_the_selection(viewer_client, mismatch_sweep):
    clean, _ = mismatch_sweep
    index = _html(viewer_client.get(reverse("benchmarks:index")))
    assert f'name="run" value="{clean.pk}"' in index and "Compare selected runs" in index
    response = viewer_client.get(reverse("benchmarks:compare"), {"run": str(clean.pk)})
    html = _html(response)
    assert response.status_code == 400 and f"Only run {clean.pk} was given; give at least two runs to compare." in html
    assert f'name="runs" value="{clean.pk}"' in html


# --- import -----------------------------------------------------------------------------------


def test_it_imports_a_vllm_file_that_keeps_its_original(operator_client, viewer_client):
    original = (DATA / "vllm-bench-serve.json").read_bytes()
    response = operator_client.post(reverse("benchmarks:run-import"),
                                    {"file": SimpleUploadedFile("vllm-bench-serve.json", original)})
    run = BenchmarkRun.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("benchmarks:run-detail", args=[run.pk])
    html = _html(viewer_client.get(response["Location"]))
    assert "vLLM bench serve JSON" in html
    assert "125.79" in html  # output tok/s from the file
    goodput = html.split("Goodput (req/s)</td>")[1][:40]
    assert "—" in goodput  # "request_goodput": null stays unavailable
    assert "The imported file held only aggregate figures, not per-request records: output throughput" in html
    download = viewer_client.get(reverse("benchmarks:run-original", args=[run.pk]))
    assert download.content == original
    assert download["Content-Disposition"] == 'attachment; filename="vllm-bench-serve.json"'


def test_it_shows_import_errors_with_the_line_and_key(operator_client):
    bad = b'{"backend": "sglang", "random_input_len": 1024, "completed": "many", "duration": 3.0}\n'
    response = operator_client.post(reverse("benchmarks:run-import"), {"file": SimpleUploadedFile("x.jsonl", bad)})
    assert response.status_code == 400
    html = _html(response)
    assert "<code>line 1.completed</code>: expected a whole number &gt;= 0, got the string &quot;many&quot;" in html
    assert not BenchmarkRun.objects.exists()
    missing = operator_client.post(reverse("benchmarks:run-import"), {})
    assert "Choose a result file to import." in _html(missing)


def test_it_lists_sweeps_and_runs_with_the_import_form_for_operators(operator_client, viewer_client, sweep):
    html = _html(operator_client.get(reverse("benchmarks:index")))
    assert reverse("benchmarks:sweep-detail", args=[sweep.pk]) in html
    assert "12 / 48" in html
    run = sweep.runs.get()
    assert f'name="run" value="{run.pk}"' in html  # pick for comparison
    assert 'enctype="multipart/form-data"' in html
    assert reverse("benchmarks:sweep-create") + f"?deployment={sweep.deployment_id}" in html
    viewer_html = _html(viewer_client.get(reverse("benchmarks:index")))
    assert 'enctype="multipart/form-data"' not in viewer_html
    assert "Importing results needs the operator role." in viewer_html


# --- charts that would mislead: one sample, a few huge outliers ---------------------------------


def _stream(start_ms: int, events_ms: list[int], index: int) -> RequestOutcome:
    return RequestOutcome(
        scheduled=T0 + start_ms * MS, start=T0 + start_ms * MS, end=T0 + events_ms[-1] * MS + MS, index=index,
        events=array("q", [T0 + e * MS for e in events_ms]), event_tokens=array("H", [1] * len(events_ms)),
        output_tokens=len(events_ms), input_tokens=16, requested_input=16, requested_output=len(events_ms),
        http_status=200, ok=True, finish_reason="length",
    )


def _measured_run(sweep: BenchmarkSweep, store: RecordStore, path: Path, **fields) -> BenchmarkRun:
    return BenchmarkRun.objects.create(
        sweep=sweep, ordinal=sweep.runs.count() + 1, status=RunStatus.DONE, concurrency=1, input_len=16,
        output_len=fields.pop("output_len", 3), num_requests=len(store), num_gpus=4,
        summary=_summary(tok_s=10.0, ttft_p99_s=0.1), records_path=str(store.save(path)), **fields)


def test_it_draws_a_one_request_run_as_a_single_marked_step_with_a_note(viewer_client, sweep, var_dir):
    store = RecordStore()
    store.add(_stream(0, [120, 170, 220], 0))
    run = _measured_run(sweep, store, var_dir / "benchmarks" / "one.npz")
    html = _html(viewer_client.get(reverse("benchmarks:run-detail", args=[run.pk])))
    ttft = _json_script(html, "chart-cdf-ttft")
    assert ttft["series"][0]["points"] == [[120.0, 1.0]]
    assert ttft["note"] == ("one sample: the CDF is a single step to 1.0 at 120 ms; a curve needs at least 2 "
                            "samples (2 requests for TTFT, TPOT and E2E).")
    assert _json_script(html, "chart-cdf-e2e")["series"][0]["points"] == [[220.0, 1.0]]
    # the two gaps of the one request are two ITL samples: a real curve, no note
    itl = _json_script(html, "chart-cdf-itl")
    assert itl["series"][0]["points"] == [[50.0, 0.5], [50.0, 1.0]] and "note" not in itl


def test_it_caps_the_itl_axis_at_p99_9_and_counts_the_points_beyond(viewer_client, sweep, var_dir):
    # 2 requests x 1500 gaps of 10 ms, plus 3 stalls of 4 s, 5 s and 6 s: a linear axis to 6 s would
    # squeeze every other gap into its first pixel.
    store = RecordStore()
    for index in range(2):
        times = [100 + 10 * k for k in range(1501)]
        if index == 1:  # three stalls: the gaps after events 300, 700 and 1100 grow by 4, 5 and 6 s
            for cut, stall_ms in ((300, 3990), (700, 4990), (1100, 5990)):
                times = times[:cut] + [t + stall_ms for t in times[cut:]]
        store.add(_stream(0, times, index))
    run = _measured_run(sweep, store, var_dir / "benchmarks" / "stalls.npz", output_len=1501)
    html = _html(viewer_client.get(reverse("benchmarks:run-detail", args=[run.pk])))
    itl = _json_script(html, "chart-cdf-itl")
    assert itl["title"] == "ITL CDF (x-axis capped at p99.9)"
    assert itl["x"]["max"] == 10.0
    assert itl["note"] == ("3 points beyond 10 ms (p99.9) not drawn; the largest is 6000 ms. The curve ends at "
                           "the fraction of samples drawn.")
    points = itl["series"][0]["points"]
    assert max(p[0] for p in points) == 10.0
    assert points[-1][1] == pytest.approx(2997 / 3000)
    # TTFT of two requests: nothing to cap, every sample drawn
    ttft = _json_script(html, "chart-cdf-ttft")
    assert "max" not in ttft["x"] and "note" not in ttft and len(ttft["series"][0]["points"]) == 2


def test_it_explains_client_cpu_in_microseconds_per_streamed_event(viewer_client, sweep):
    run = sweep.runs.get()
    run.summary = {**run.summary, "client_cpu_us_per_event": 34.5}
    run.save()
    html = _html(viewer_client.get(reverse("benchmarks:run-detail", args=[run.pk])))
    row = html.split("Client CPU per streamed event")[1].split("</tr>")[0]
    assert row.startswith(" (µs per event)")
    assert '<td class="num">34.50</td>' in row
    assert "divided by the server-sent events they parsed" in row
    assert 'title="CPU time the load generator' in html.split("Client CPU per streamed event")[0][-400:]
    assert "(ms)" not in row


# --- live progress of the running point -------------------------------------------------------


def test_it_shows_the_running_points_progress_from_its_row(viewer_client, sweep):
    running = BenchmarkRun.objects.create(
        sweep=sweep, ordinal=1, status=RunStatus.RUNNING, concurrency=8, input_len=256, output_len=256,
        num_requests=24, progress={"done": 9, "total": 24, "failed": 1, "output_tokens": 2304, "elapsed_s": 12.5,
                                   "tok_s": 201.6, "tok_s_mean": 2304 / 12.5, "duration_s": None,
                                   "source": "client"})
    html = _html(viewer_client.get(reverse("benchmarks:sweep-progress", args=[sweep.pk]), {"points": "1"}))
    live = html.split('class="run-progress"')[1].split("</dd>")[0]
    assert reverse("benchmarks:run-detail", args=[running.pk]) in live
    assert "9 / 24 requests done" in live and "1 failed" in live
    # both rates, each named: the last window's and the mean since the start (2304 tokens / 12.5 s)
    assert ("201.6 output tok/s (last 0.5 s window), 184.3 output tok/s (mean since start), 12.5 s elapsed"
            in live)
    assert "counted by the load generator" in live


def test_it_measures_a_time_limited_sweep_by_points_and_elapsed_time(viewer_client, sweep):
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(grid={**sweep.grid, "duration_s": 60.0, "requests": None})
    BenchmarkRun.objects.create(
        sweep=sweep, ordinal=1, status=RunStatus.RUNNING, concurrency=8, input_len=256, output_len=256,
        num_requests=7812, duration_s=60.0,
        progress={"done": 40, "total": 7812, "failed": 0, "elapsed_s": 30.0, "tok_s": 150.0, "duration_s": 60.0})
    html = _html(viewer_client.get(reverse("benchmarks:sweep-progress", args=[sweep.pk]), {"points": "1"}))
    # a row written before tok_s_mean existed shows the window's rate alone
    live = html.split('class="run-progress"')[1].split("</dd>")[0]
    assert "150.0 output tok/s (last 0.5 s window), 30.0 s" in live and "mean since start" not in live
    # 1 of 2 points done, the running one half way through its 60 s: 75 %
    assert 'style="width: 75.0%"' in html
    assert "30.0 s of 60 s elapsed" in html
    # points limited by time alone: no sweep total until they have run, never one behind the count
    requests = html.split('class="requests-done"')[1].split("</dd>")[0]
    assert "12 requests done" in requests and "/ 48" not in requests
    assert "total not known: points limited by time send what fits in their time" in requests


def test_a_time_limited_points_progress_says_its_total_is_what_was_sent_so_far(viewer_client, sweep):
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(grid={**sweep.grid, "duration_s": 60.0, "requests": None})
    BenchmarkRun.objects.create(
        sweep=sweep, ordinal=1, status=RunStatus.RUNNING, concurrency=8, input_len=256, output_len=256,
        duration_s=60.0, progress={"done": 42, "total": 44, "failed": 0, "elapsed_s": 15.0, "tok_s": 150.0,
                                   "duration_s": 60.0, "total_sent_so_far": True})
    html = _html(viewer_client.get(reverse("benchmarks:sweep-progress", args=[sweep.pk]), {"points": "1"}))
    live = html.split('class="run-progress"')[1].split("</dd>")[0]
    # the terminal's words (sweep_follow_line: "point 42 done of 44 sent so far, time-limited")
    assert "42 done of 44 sent so far, time-limited <span" in live
    assert "(the point sends what fits in its time)" in live
    assert "42 / 44" not in live and "requests done" not in live
    # the bar follows the time, not 42 / 44: 1 of 2 points done, the running one a quarter through
    assert 'style="width: 62.5%"' in html


# --- duplicate imports ------------------------------------------------------------------------


def test_it_refuses_a_duplicate_import_naming_the_run_unless_asked_to_keep_both(operator_client):
    original = (DATA / "vllm-bench-serve.json").read_bytes()
    first = operator_client.post(reverse("benchmarks:run-import"),
                                 {"file": SimpleUploadedFile("vllm-bench-serve.json", original)})
    run = BenchmarkRun.objects.get()
    assert first.status_code == 302
    again = operator_client.post(reverse("benchmarks:run-import"),
                                 {"file": SimpleUploadedFile("renamed.json", original)})
    assert again.status_code == 409
    html = _html(again)
    assert f"This file was already imported as run #{run.pk} (vllm-bench-serve.json) on" in html
    # the form names its checkbox, never the API's field, and gives the file's SHA-256 in full
    digest = hashlib.sha256(original).hexdigest()
    assert (f"(same content, SHA-256 {digest}); tick “Import again runs that were imported before” below and "
            "import the file again to keep a second copy.") in html
    assert "allow_duplicate to" not in html
    assert f'<a href="{reverse("benchmarks:run-detail", args=[run.pk])}">run #{run.pk}</a>' in html
    assert 'name="allow_duplicate"' in html
    assert BenchmarkRun.objects.count() == 1
    kept = operator_client.post(reverse("benchmarks:run-import"),
                                {"file": SimpleUploadedFile("renamed.json", original), "allow_duplicate": "1"})
    assert kept.status_code == 302 and BenchmarkRun.objects.count() == 2
    # other white space around the same result is the same result: refused, naming both runs
    spaced = operator_client.post(reverse("benchmarks:run-import"),
                                  {"file": SimpleUploadedFile("v2.json", original.replace(b"}", b"}\n", 1))})
    assert spaced.status_code == 409 and BenchmarkRun.objects.count() == 2
    assert f"already imported as run #{run.pk} (vllm-bench-serve.json, " in _html(spaced)
    # one changed value is another result
    changed = operator_client.post(reverse("benchmarks:run-import"), {"file": SimpleUploadedFile(
        "v3.json", original.replace(b'"max_concurrency": null', b'"max_concurrency": 16'))})
    assert changed.status_code == 302 and BenchmarkRun.objects.count() == 3


def test_it_refuses_non_ascii_digits_like_any_malformed_number(viewer_client, operator_client, deployment):
    # "²".isdigit() is true, but int("²") raises: the same 400 or form error as "x", never a 500
    assert viewer_client.get(reverse("benchmarks:compare"), {"runs": "1,\u00b2"}).status_code == 400
    assert operator_client.get(reverse("benchmarks:sweep-create") + "?deployment=%C2%B2").status_code == 400
    response = operator_client.post(reverse("benchmarks:sweep-create"), {
        "deployment": deployment.pk, "concurrency": "1,\u00b2", "lengths": "\u00b2:8", "requests": "\u00b2",
    })
    assert response.status_code == 400
    html = _html(response)
    assert escape('must be an integer 1..4096, got the string "\u00b2"') in html
    assert escape('must be an integer 1..100000, got the string "\u00b2"') in html
    assert escape('''must be [input_len, output_len] or 'in:out' with 1..1000000 tokens, got the string "\u00b2:8"''') in html
    assert not BenchmarkSweep.objects.exists()


# --- failed points ----------------------------------------------------------------------------

CRASH = ("router #0 killed by signal 9 (SIGKILL); restart policy is 'never' during point c=64 256/256 "
         "while deployment #1 was still marked ready; the sweep stopped")


@pytest.fixture
def crashed_sweep(deployment) -> tuple[BenchmarkSweep, BenchmarkRun, BenchmarkRun]:
    """A sweep that failed when its router died: c=8 done; c=64 stopped by the crash before its summary
    was stored, with the load generator's last count (3,512 of 3,600 finished requests failed)."""
    sweep = BenchmarkSweep.objects.create(
        deployment=deployment, status=SweepStatus.FAILED, reason=CRASH, points_total=3, points_done=1, num_gpus=4,
        grid={"concurrency": [8, 64, 128], "lengths": [[256, 256]], "requests": 4000}, topology="single",
        engine="sim")
    done = BenchmarkRun.objects.create(
        sweep=sweep, ordinal=0, status=RunStatus.DONE, concurrency=8, input_len=256, output_len=256,
        num_requests=4, num_gpus=4, summary=_summary(tok_s=123.4, ttft_p99_s=0.298), output_tok_s=123.4)
    crashed = BenchmarkRun.objects.create(
        sweep=sweep, ordinal=1, status=RunStatus.FAILED, reason=CRASH, concurrency=64, input_len=256,
        output_len=256, num_requests=4000, num_gpus=4,
        progress={"done": 3600, "total": 4000, "failed": 3512, "output_tokens": 22528, "elapsed_s": 2.1,
                  "tok_s": 0.0})
    return sweep, done, crashed


def test_it_shows_the_failed_count_of_a_point_stopped_before_its_summary(viewer_client, crashed_sweep):
    sweep, done, crashed = crashed_sweep
    html = _html(viewer_client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])))
    row = html.split(f'id="run-{crashed.pk}"')[1].split("</tr>")[0]
    assert ('<td class="num failures"><span class="bad">3,512 failed of 3,600 finished</span>'
            '<div class="muted small">counted while the point ran</div></td>') in row
    assert '<td class="num">3600</td>' in row  # requests finished when it stopped, not the 4000 planned
    done_row = html.split(f'id="run-{done.pk}"')[1].split("</tr>")[0]
    assert '<span class="bad">1 failed of 4</span>' in done_row
    assert CRASH.replace("'", "&#x27;") in html  # the sweep's reason names the crash

    page = _html(viewer_client.get(reverse("benchmarks:run-detail", args=[crashed.pk])))
    assert "3,512 failed of 3,600 finished" in page
    assert "No failed requests." not in page
    assert "counted by the load generator while the point ran" in page
    index = _html(viewer_client.get(reverse("benchmarks:index")))
    assert "3,512 failed of 3,600 finished" in index
    # nothing was aborted in flight: no column for it
    assert all("Aborted (requests)" not in re.sub(r"<[^>]+>", "", page) for page in (html, index))


def test_it_counts_requests_a_cancel_aborted_before_the_summary_apart_from_failures(viewer_client, crashed_sweep):
    sweep, _, stopped = crashed_sweep
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(status=SweepStatus.CANCELLED, reason="")
    BenchmarkRun.objects.filter(pk=stopped.pk).update(status=RunStatus.CANCELLED, reason="", progress={
        "done": 3, "total": 4000, "failed": 1, "aborted": 2, "output_tokens": 96, "elapsed_s": 0.4, "tok_s": 0.0})
    html = _html(viewer_client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])))
    assert '>Failures <span class="unit">(requests)</span></th>' in html
    assert '>Aborted <span class="unit">(requests)</span></th>' in html
    row = html.split(f'id="run-{stopped.pk}"')[1].split("</tr>")[0]
    assert ('<td class="num failures"><span class="bad">1 failed of 3 finished</span>'
            '<div class="muted small">counted while the point ran</div></td>') in row
    assert '<td class="num aborted"><span class="warn">2 aborted in flight by the cancel</span>' in row

    page = _html(viewer_client.get(reverse("benchmarks:run-detail", args=[stopped.pk])))
    assert "1 failed of 3 finished" in page.split("<td>Failed requests")[1].split("</tr>")[0]
    assert ('<td class="num aborted">2 aborted in flight by the cancel</td>'
            in page.split("<td>Aborted requests")[1].split("</tr>")[0])
    assert "2 aborted in flight by the cancel: neither successes nor failures of the server" in page
    assert "ended in flight by the cancel: neither successes nor failures" in page and "by a stop" not in page
    index = _html(viewer_client.get(reverse("benchmarks:index")))
    assert '<td class="num aborted">2 aborted in flight by the cancel</td>' in index
    # the text report's failures column
    assert results_table_rows([BenchmarkRun.objects.get(pk=stopped.pk)], num_gpus=4)[0][9] == "1 (live) (+2 aborted)"


def test_it_shows_what_a_point_stopped_early_never_sent(viewer_client, crashed_sweep, var_dir):
    sweep, _, crashed = crashed_sweep
    BenchmarkRun.objects.filter(pk=crashed.pk).update(progress={}, summary={
        **_summary(tok_s=3.0, ttft_p99_s=0.2), "requests": 96, "successes": 60, "failures": 36, "not_sent": 3904,
        "stopped_early": "target unreachable: 32 consecutive connection failures (connection refused to "
                         "127.0.0.1:30000)", "ended_by": "target_unreachable"})
    page = _html(viewer_client.get(reverse("benchmarks:run-detail", args=[crashed.pk])))
    assert "36 failed of 96, 3,904 not sent" in page
    assert ("the load generator stopped sending: target unreachable: 32 consecutive connection failures "
            "(connection refused to 127.0.0.1:30000)") in page


def test_it_leaves_failed_and_metricless_runs_out_of_the_comparison_ranking(viewer_client, crashed_sweep,
                                                                           mismatch_sweep):
    sweep, done, crashed = crashed_sweep
    clean, _ = mismatch_sweep  # 100 tok/s, TTFT p99 100 ms
    # A failed point whose few successes look excellent must not be crowned.
    BenchmarkRun.objects.filter(pk=crashed.pk).update(summary=_summary(tok_s=900.0, ttft_p99_s=0.001))
    # The two ranked runs at one load, so that a best is named (none is across loads).
    BenchmarkRun.objects.filter(pk=clean.pk).update(concurrency=8)
    _enough_requests(clean, done)
    html = _html(viewer_client.get(reverse("benchmarks:compare"), {"runs": f"{clean.pk},{done.pk},{crashed.pk}"}))
    assert re.search(r'<td>output throughput \(tok/s\)</td><td class="num">100.0</td>'
                     r'<td class="num best">123.4</td><td class="num">—</td>', html)
    assert re.search(r'<td>TTFT p99 \(ms\)</td><td class="num best">100\.0</td><td class="num">29\d\.\d</td>'
                     r'<td class="num">—</td>', html)
    assert re.search(r'<td>failures \(requests\)</td><td class="num">1</td><td class="num">1</td>'
                     r'<td class="num">1</td>', html)
    assert f"Run #{crashed.pk} is not ranked: it failed (router #0 killed by signal 9 (SIGKILL)" in html
    assert f'title="run #{crashed.pk} is not ranked: it failed (router #0 killed by signal 9' in html
    tok = _json_script(html, "chart-compare-tok-s")
    assert [p for s in tok["series"] for p in s["points"]] == [[8.0, 100.0], [8.0, 123.4]]  # no 900 at c=64


def test_it_lists_every_grid_error_of_the_form_at_once(operator_client, deployment):
    # The form could not read "x"; what it could read still breaks the service's bounds: both are said.
    response = operator_client.post(reverse("benchmarks:sweep-create"), {
        "deployment": deployment.pk, "concurrency": "1,x", "lengths": "100000:8", "requests": "200",
        "rates": "0.5", "duration": "",
    })
    assert response.status_code == 400
    html = _html(response)
    assert escape('must be an integer 1..4096, got the string "x"') in html
    assert "point c=1 100000/8 needs 20,000,000 prompt tokens" in html
    assert "200 requests at 0.5 req/s take about 400 s" not in html  # within the 24 h bound: no error
    assert not BenchmarkSweep.objects.exists()


def test_the_live_panel_names_both_output_rates_with_the_window_length(viewer_client, sweep):
    html = _html(viewer_client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])))
    panel = html.split('id="sweep-live"')[1].split("</section>")[0]
    assert 'data-tok-window-s="0.5"' in panel
    assert '<dt data-f="tok_s-label">Output tok/s, last 0.5 s window</dt>' in panel
    assert "<dt>Output tok/s, mean since start</dt>" in panel and 'data-f="tok_s_mean"' in panel


@pytest.mark.parametrize(("status", "note", "per_gpu", "nothing"), [
    (SweepStatus.RUNNING, None, "No finished point with output tok/s yet.", "No finished points yet."),
    (SweepStatus.CANCELLED, "No run finished.", "No point finished with output tok/s.", "No point finished."),
    (SweepStatus.FAILED, "No run finished.", "No point finished with output tok/s.", "No point finished."),
    (SweepStatus.DONE, None, "No point finished with output tok/s.", "No point finished."),
])
def test_an_ended_sweep_says_no_point_finished_without_yet(viewer_client, sweep, status, note, per_gpu, nothing):
    from benchmarks.services import sweep_analysis

    sweep.runs.update(status=RunStatus.FAILED, output_tok_s=None, summary={})
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(status=status, points_done=0, analysis={})
    html = _html(viewer_client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])))
    assert _json_script(html, "chart-sweep-tok-s-per-gpu")["empty"] == per_gpu
    if note:
        assert note in html
    assert "No finished run yet" not in html
    if status != SweepStatus.DONE:
        expected = "no finished run yet" if status == SweepStatus.RUNNING else "no run finished"
        assert sweep_analysis(sweep=BenchmarkSweep.objects.get(pk=sweep.pk))["notes"] == [expected]
    sweep.runs.all().delete()
    html = _html(viewer_client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])))
    assert f'<div class="empty">{nothing}</div>' in html
    if status != SweepStatus.RUNNING:
        assert " yet." not in html.split('id="sweep-results"')[1]


def test_an_export_page_of_a_format_it_does_not_offer_is_a_400_naming_those_it_does(viewer_client):
    sweep = BenchmarkSweep.objects.create(name="fmt", status=SweepStatus.DONE)
    run = BenchmarkRun.objects.create(sweep=sweep, status="done", concurrency=1, input_len=8, output_len=8, summary={})
    for url, offered in ((f"/benchmarks/sweeps/{sweep.pk}/export.xml", "csv, json"),
                         (f"/benchmarks/runs/{run.pk}/export.xml", "csv, json, records.csv"),
                         ("/benchmarks/sweeps/999999/export.xml", "csv, json")):
        answer = viewer_client.get(url)
        assert answer.status_code == 400, url
        assert f"format must be one of {offered}; got &#x27;xml&#x27;" in answer.content.decode(), url
    assert viewer_client.get(f"/benchmarks/sweeps/{sweep.pk}/export.csv").status_code == 200
    assert viewer_client.get(f"/benchmarks/runs/{run.pk}/export.json").status_code == 200
