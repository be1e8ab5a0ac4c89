"""What a new user of the pages found, fixed: a point cancelled with nothing finished shows "—"
for its rates, never 0; a comparison's changes are against a run that is comparable (none when no
run is); an imported run's page agrees with itself on failed requests the file does not record;
the sweep form says up front that a stopped deployment cannot be swept, and without a deployment
lists the ones that can; a GET of an address that only takes a form's POST goes back to the form;
the wall's figures fit their tile; table cells of actions stay table cells; live times are UTC.

Rows are written directly (or imported from the real result files under ``data/``), like the
other page tests."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from django.urls import reverse

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import run_import, runs_compare
from benchmarks.tests.page_support import logged_in_client
from deployments.choices import DeploymentStatus
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
NODE = shutil.which("node")


@pytest.fixture
def deployment(db):
    node = cpu_node_create()
    recipe = recipe_row_create(node=node, name="local-sim-single", spec={"sim": {"gpus_modelled": 4}})
    return deployment_row_create(recipe=recipe, status=DeploymentStatus.READY)


def _done_summary(*, tok_s: float) -> dict:
    dist = {"mean": 0.2, "p50": 0.2, "p90": 0.28, "p99": 0.3, "count": 8}
    return {"requests": 8, "successes": 8, "failures": 0, "duration_s": 2.0, "output_throughput_tok_s": tok_s,
            "request_throughput_req_s": 4.0, "ttft_s": dist, "tpot_s": dist, "e2e_s": dist, "itl_s": dist,
            "flags": {}, "errors": {}}


def _cell_texts(row_html: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row_html, re.S)]


# --- a cancelled point with nothing finished -----------------------------------------------------


@pytest.mark.django_db
def test_a_cancelled_point_with_no_success_shows_dashes_for_its_rates(deployment, viewer):
    sweep = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.CANCELLED, points_total=3,
                                          points_done=2, requests_total=12, requests_done=8, num_gpus=4,
                                          grid={"concurrency": [1, 2, 4], "lengths": [[16, 64]], "requests": 4})
    # What the load generator's summary holds for a point cancelled with its 4 requests in flight:
    # 0 successes over a non-zero time, so its rates computed to 0.0.
    summary = {"requests": 4, "successes": 0, "failures": 4, "aborted": 4, "duration_s": 0.8,
               "output_throughput_tok_s": 0.0, "request_throughput_req_s": 0.0, "goodput_req_s": 0.0,
               "errors": {"aborted: the sweep was cancelled": 4}, "ended_by": "cancelled",
               "flags": {"cancelled_partial": True},
               "partial": {"reason": "the sweep was cancelled", "completed": 0, "sent": 4, "planned": 4,
                           "planned_duration_s": None, "aborted": 4, "not_sent": 0}}
    cut = BenchmarkRun.objects.create(sweep=sweep, ordinal=2, status=RunStatus.CANCELLED, concurrency=4,
                                      input_len=16, output_len=64, num_requests=4, num_gpus=4, summary=summary,
                                      flags=["cancelled_partial"], output_tok_s=0.0)
    html = logged_in_client(viewer).get(reverse("benchmarks:sweep-detail", args=[sweep.pk])).content.decode()
    row = html.split(f'id="run-{cut.pk}"')[1].split("</tr>")[0]
    cells = _cell_texts(row)
    # Point, status, requests, then output tok/s, per GPU, req/s, goodput.
    assert cells[3:7] == ["—", "—", "—", "—"], cells
    assert "0.0" not in cells[3:7] and "0.000" not in cells[3:7]

    # The progress line counts finished requests and says how many the cancel ended in flight.
    progress = html.split('class="requests-done"')[1].split("</dd>")[0]
    assert "8 finished of 12 sent" in progress
    assert "4 aborted in flight by the cancel (not counted as done)" in progress


@pytest.mark.django_db
def test_the_sweep_api_says_how_many_requests_the_cancel_ended(deployment, viewer_api):
    sweep = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.CANCELLED, points_total=1,
                                          requests_total=4, requests_done=0, num_gpus=4)
    BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.CANCELLED, concurrency=4, input_len=16,
                                output_len=64, num_requests=4,
                                summary={"requests": 4, "successes": 0, "failures": 4, "aborted": 4,
                                         "partial": {"aborted": 4, "completed": 0, "sent": 4}})
    body = viewer_api.get(f"/api/sweeps/{sweep.pk}/").json()
    assert (body["requests_done"], body["requests_total"], body["requests_cancelled"]) == (0, 4, 4)
    other = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.DONE, points_total=1,
                                          requests_total=4, requests_done=4)
    body = viewer_api.get(f"/api/sweeps/{other.pk}/").json()
    assert (body["requests_cancelled"], body["requests_aborted"]) == (0, 0)


# --- comparison baseline -------------------------------------------------------------------------


def _sglang_run(operator) -> BenchmarkRun:
    text = (DATA / "sglang-bench-serving-h200.jsonl").read_text(encoding="utf-8")
    [run] = run_import(text=text, filename="sglang.jsonl", user=operator)
    return run


@pytest.mark.django_db
def test_the_comparison_baseline_is_the_first_comparable_run(deployment, operator, viewer):
    imported = _sglang_run(operator)  # random lengths drawn from a range: not ranked
    sweep = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.DONE, points_total=1,
                                          points_done=1, num_gpus=4)
    measured = BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.DONE, concurrency=8,
                                           input_len=1024, output_len=1024, num_requests=8, num_gpus=4,
                                           summary=_done_summary(tok_s=14.0))
    compared = runs_compare(runs=[imported, measured])
    assert [e["rankable"] for e in compared["runs"]] == [False, True]
    assert compared["baseline"] == measured.pk
    tok = next(f for f in compared["fields"] if f["key"] == "output_throughput_tok_s")
    assert tok["deltas_pct"][1] == 0.0

    client = logged_in_client(viewer)
    html = client.get(reverse("benchmarks:compare") + f"?run={imported.pk}&run={measured.pk}").content.decode()
    assert f"Change vs baseline run #{measured.pk}" in html
    header = html.split("<thead>")[1].split("</thead>")[0]
    # The unranked run is not offered as a baseline.
    assert header.count("use as baseline") == 0

    # Asking for the unranked run as the baseline gives no change, and says why.
    chosen = runs_compare(runs=[imported, measured], baseline_id=imported.pk)
    assert all(d is None for f in chosen["fields"] for d in f["deltas_pct"])
    page = client.get(reverse("benchmarks:compare"), {"runs": f"{imported.pk},{measured.pk}",
                                                       "baseline": imported.pk}).content.decode()
    assert '<tr class="delta">' not in page
    assert (f"No change is given: the baseline run #{imported.pk} is not ranked (not comparable with fixed-length "
            "runs), so no delta is given; choose a ranked run as the baseline.") in page


@pytest.mark.django_db
def test_no_change_is_given_when_no_run_is_comparable(operator, viewer):
    # vLLM's result file does not record the requested lengths: such runs are ranked against none.
    text = (DATA / "vllm-bench-serve.json").read_text(encoding="utf-8")
    [first] = run_import(text=text, filename="vllm.json", user=operator)
    [second] = run_import(text=text, filename="again.json", user=operator, allow_duplicate=True)
    compared = runs_compare(runs=[first, second])
    assert all(d is None for f in compared["fields"] for d in f["deltas_pct"])
    assert "no run is comparable (none is ranked), so no delta is given" in compared["notes"]
    html = logged_in_client(viewer).get(reverse("benchmarks:compare") + f"?run={first.pk}&run={second.pk}")
    page = html.content.decode()
    assert html.status_code == 200 and '<tr class="delta">' not in page
    assert "No change is given: no run is comparable (none is ranked), so no delta is given." in page
    assert (f"Run #{first.pk} is not ranked: lengths unknown — the result file does not record requested "
            "input/output lengths") in page
    assert "mismatch" not in page.split('class="notice warn refusals"')[1].split("</div>")[0]


# --- an imported run without a failure count -----------------------------------------------------


@pytest.mark.django_db
def test_an_imported_run_page_agrees_with_itself_on_failures(operator, viewer):
    run = _sglang_run(operator)
    assert run.summary.get("failures") is None and run.summary.get("successes") == 300
    html = logged_in_client(viewer).get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    requests = html.split("<dt>Requests</dt><dd>")[1].split("</dd>")[0]
    assert requests.startswith("300 succeeded") and "failed requests are not in the file" in requests
    failed = html.split("<td>Failed requests")[1].split("</tr>")[0]
    assert "not in the file" in failed and "—" not in failed
    assert "No failed requests." not in html
    assert "Failed requests are not in the file: it records only the 300 successful requests" in html
    assert "<td>Successful requests</td><td class=\"num\">300</td>" in html


@pytest.mark.django_db
def test_an_imported_run_with_a_failure_count_shows_its_total(operator, viewer):
    text = (DATA / "vllm-bench-serve.json").read_text(encoding="utf-8")
    [run] = run_import(text=text, filename="vllm.json", user=operator)
    s = run.summary
    assert isinstance(s.get("failures"), int) and isinstance(s.get("successes"), int)
    html = logged_in_client(viewer).get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    requests = html.split("<dt>Requests</dt><dd>")[1].split("</dd>")[0]
    total = s["requests"] if isinstance(s.get("requests"), int) else s["successes"] + s["failures"]
    assert requests.strip().startswith(str(total))
    assert "not in the file" not in html.split("<td>Failed requests")[1].split("</tr>")[0]


# --- the sweep form ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_sweep_form_of_a_stopped_deployment_says_so_up_front(deployment, operator):
    deployment.status = DeploymentStatus.STOPPED
    deployment.save(update_fields=["status"])
    client = logged_in_client(operator)
    page = client.get(reverse("benchmarks:sweep-create") + f"?deployment={deployment.pk}")
    html = page.content.decode()
    assert page.status_code == 200
    assert "A sweep waits for it to become ready" not in html
    assert f"Deployment #{deployment.pk} is <strong>stopped</strong>: a sweep cannot run on it." in html
    assert re.search(r'<button type="submit" disabled[^>]*>Start sweep</button>', html)
    assert "<fieldset disabled" in html
    # A starting one still says that the sweep waits.
    deployment.status = DeploymentStatus.STARTING
    deployment.save(update_fields=["status"])
    html = client.get(reverse("benchmarks:sweep-create") + f"?deployment={deployment.pk}").content.decode()
    assert "A sweep waits for it to become ready" in html and "a sweep cannot run on it" not in html


@pytest.mark.django_db
def test_the_sweep_form_without_a_deployment_lists_the_ones_that_can_be_swept(deployment, operator):
    stopped = deployment_row_create(recipe=deployment.recipe, status=DeploymentStatus.STOPPED)
    client = logged_in_client(operator)
    page = client.get(reverse("benchmarks:sweep-create"))
    html = page.content.decode()
    assert page.status_code == 200
    assert f'href="{reverse("benchmarks:sweep-create")}?deployment={deployment.pk}"' in html
    assert f"?deployment={stopped.pk}" not in html

    deployment.status = DeploymentStatus.FAILED
    deployment.save(update_fields=["status"])
    page = client.get(reverse("benchmarks:sweep-create"))
    html = page.content.decode()
    assert page.status_code == 200
    assert "No deployment can be swept now." in html
    assert f'href="{reverse("deployments:deployment-list")}"' in html


# --- a GET of a POST-only address ----------------------------------------------------------------


@pytest.mark.django_db
def test_a_get_of_a_post_only_address_goes_back_to_its_form(deployment, operator):
    client = logged_in_client(operator)
    page = client.get(reverse("benchmarks:run-import"))
    assert page.status_code == 302 and page["Location"] == reverse("benchmarks:index") + "#import"
    index = client.get(page["Location"]).content.decode()
    assert '<h2 id="import">Import results</h2>' in index
    sweep = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.DONE)
    cancel = client.get(reverse("benchmarks:sweep-cancel", args=[sweep.pk]))
    assert cancel.status_code == 302 and cancel["Location"] == reverse("benchmarks:sweep-detail", args=[sweep.pk])
    assert client.put(reverse("benchmarks:run-import")).status_code == 405


# --- style sheet and live times ------------------------------------------------------------------


def _css_rule(css: str, selector: str) -> str:
    match = re.search(r"(?:^|\n)" + re.escape(selector) + r"\s*\{([^}]*)\}", css)
    assert match, f"no rule for {selector}"
    return match.group(1)


def test_the_wall_figures_shrink_inside_their_tile_and_action_cells_stay_cells() -> None:
    css = (REPO / "static/ceiling/ceiling.css").read_text(encoding="utf-8")
    figures = _css_rule(css, ".wall-figures")
    columns = re.search(r"grid-template-columns:\s*([^;]+);", figures).group(1)
    # The tok/s column shrinks; the two side figures take their own width. That nothing in a tile is
    # cut, six live tiles at 1920x1080 and at 1440x900, is measured in a real browser
    # (controlplane/tests/browser/test_wall_fit_browser.py).
    assert columns.startswith("minmax(0,") and columns.count("max-content") <= 2
    assert "white-space: nowrap" in _css_rule(css, ".wall-figures .live-value")  # "32.2 tok/s" never wraps
    cells = _css_rule(css, "td.actions, th.actions")
    assert "display: table-cell" in cells and "white-space: nowrap" in cells


LIVE_HARNESS = r"""
const fs = require("fs"), vm = require("vm");
const painted = [];
const sandbox = {window: {addEventListener() {}, location: {protocol: "http:", host: "x"}},
                 document: {addEventListener() {}, documentElement: {setAttribute() {}},
                            querySelectorAll() { return painted; }, dispatchEvent() {}},
                 CustomEvent: function () {}, setInterval() { return 0; }, clearInterval() {}, Date, Math, JSON};
vm.createContext(sandbox);
vm.runInContext(fs.readFileSync(process.argv[1] + "/static/ceiling/live.js", "utf8"), sandbox);
const L = sandbox.window.CeilingLive;
// 12:34:56 UTC on 1 Jan 1970; the process runs in a zone 5.5 h from UTC.
process.stdout.write(JSON.stringify({tz: new Date(45296 * 1000).getHours(), clock: L.clock(45296),
                                     utc: L.clockUtc(45296), none: L.clockUtc(null)}));
"""


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed")
def test_live_times_are_utc_whatever_the_browser_zone() -> None:
    done = subprocess.run([NODE, "-e", LIVE_HARNESS, str(REPO)], capture_output=True, text=True, timeout=30,
                          check=False, env={"TZ": "Asia/Kolkata", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["tz"] == 18  # the zone is really not UTC here
    assert (out["clock"], out["utc"], out["none"]) == ("12:34:56", "12:34:56 UTC", "—")
    live = (REPO / "static/ceiling/live.js").read_text(encoding="utf-8")
    dashboards = (REPO / "static/ceiling/dashboards.js").read_text(encoding="utf-8")
    assert "getHours()" not in live and "stale since \" + clockUtc(" in live
    for text in ('"sample at " + CeilingLive.clockUtc(', '"no sample since " + CeilingLive.clockUtc(',
                 "clockEl.textContent = CeilingLive.clockUtc(new Date())"):
        assert text in dashboards, text


@pytest.mark.django_db
def test_a_done_sweep_with_runs_and_nothing_aborted_reports_zero_aborted_and_cancelled(deployment, viewer_api):
    sweep = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.DONE, points_total=2,
                                          requests_total=8, requests_done=8, num_gpus=4)
    for ordinal in (0, 1):
        BenchmarkRun.objects.create(sweep=sweep, ordinal=ordinal, status=RunStatus.DONE, concurrency=2, input_len=16,
                                    output_len=64, num_requests=4,
                                    summary={"requests": 4, "successes": 4, "failures": 0, "aborted": 0})
    body = viewer_api.get(f"/api/sweeps/{sweep.pk}/").json()
    assert (body["requests_done"], body["requests_cancelled"], body["requests_aborted"]) == (8, 0, 0)
    listed = next(s for s in viewer_api.get("/api/sweeps/").json()["results"] if s["id"] == sweep.pk)
    assert (listed["requests_cancelled"], listed["requests_aborted"]) == (0, 0)


@pytest.mark.django_db
def test_the_sweep_form_deployment_picker_labels_its_links_with_the_deployment(deployment, operator):
    html = logged_in_client(operator).get(reverse("benchmarks:sweep-create")).content.decode()
    assert f">Sweep deployment #{deployment.pk}</a>" in html
    assert f">Sweep #{deployment.pk}</a>" not in html  # not to be read as a sweep's id
