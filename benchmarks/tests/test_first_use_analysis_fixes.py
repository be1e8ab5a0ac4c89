"""What a new user's first runs found in comparison, analysis, charts and the sweep command:

* a run whose output events came in batches (``itl_coalesced``) is named in the comparison's notes
  and not crowned for the TTFT and TPOT its client could not time;
* a decode-pause finding quotes the step its share was measured against, not the TPOT a fallback
  fit uses in its place;
* a request CDF is drawn from 0 on a 0-1 axis;
* ``manage.py sweep`` takes every grid field the API takes.

The coalesced run is measured by the real load generator against a real HTTP server
(:mod:`benchmarks.tests.replay_server`) that writes the first 9 of 32 tokens in one write, as the
sglang-router relayed a sim PD deployment's output in a first run (whether the router batches
depends on its timing, so the pattern is scripted); the run it is compared with is a real sweep
of a real ``sim`` server, slowed so that its tokens are far enough apart that a busy machine's
late reads do not batch them too. The analysis runs on stored run summaries through
:func:`benchmarks.services.sweep_analyse`; the charts through the run page and the real
``static/ceiling/charts.js`` under Node.js with the real uPlot."""
from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
from array import array
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.loadgen import Api, LoadConfig, RequestSpec, loadgen_run, run_summary
from benchmarks.loadgen.records import RecordStore, RequestOutcome
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import runs_compare, sweep_analyse, sweep_create, sweep_execute
from benchmarks.services.runs import _store_summary, records_dir
from benchmarks.tests.page_support import json_script, logged_in_client
from benchmarks.tests.replay_server import ReplayProcess, sse
from benchmarks.tests.sweep_support import sim_deployment_create, sim_start
from deployments.choices import DeploymentStatus

REPO = Path(__file__).resolve().parents[2]
NODE = shutil.which("node")


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


# --- compare: coalesced output events -----------------------------------------------------------

IN_LEN, OUT_LEN = 128, 32
# demo-fast's decode step at batch 1 (4 ms fixed + 1 ms per sequence) and the TTFT of a 128-token
# prompt (10 ms + 0.1 ms per token) plus the 8 steps the router held back before its first write.
STEP_S = 0.005
FIRST_WRITE_S = 0.0228 + 8 * STEP_S
BATCHED = 9
# The sim run it is compared with steps 10 times slower (50 ms): a client that reads late by a
# few milliseconds on a loaded machine takes two of demo-fast's 5 ms steps in one read, and a
# tenth of such gaps flags that run as coalesced too; a 50 ms step is not read late that often.
STEADY_TIME_SCALE = 10.0


@pytest.fixture
def steady_sim_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a real demo-fast sim engine whose modelled times are :data:`STEADY_TIME_SCALE`
    times longer, stopped after the test."""
    base, proc = sim_start(tmp_path_factory.mktemp("steady-sim") / "sim.log", time_scale=STEADY_TIME_SCALE)
    yield base
    proc.terminate()
    proc.wait(timeout=10)


def _coalesced_script() -> dict:
    """A completions stream of 32 tokens: the first 9 in one write, then one every 5 ms; usage at
    the end (so the token counts are the server's, not estimated)."""
    events = [sse({"choices": [{"text": " t", "finish_reason": "length" if i == OUT_LEN - 1 else None}]})
              for i in range(OUT_LEN)]
    writes = [[FIRST_WRITE_S, "".join(events[:BATCHED])]]
    writes += [[FIRST_WRITE_S + STEP_S * k, events[BATCHED - 1 + k]] for k in range(1, OUT_LEN - BATCHED + 1)]
    end = FIRST_WRITE_S + STEP_S * (OUT_LEN - BATCHED) + 0.001
    writes += [[end, sse({"choices": [], "usage": {"prompt_tokens": IN_LEN, "completion_tokens": OUT_LEN}})],
               [end + 0.001, sse("[DONE]")]]
    return {"routes": {"/v1/completions": [{"writes": writes, "tokens": OUT_LEN}]}}


def _coalesced_run(tmp_path: Path, *, num_gpus: int) -> BenchmarkRun:
    """10 requests at c=1 against the batching server (the fewest a comparison names a best from:
    MIN_COMPARED_REQUESTS), stored as a sweep stores a point (the same :func:`_store_summary`, the
    records in ``VAR_DIR/benchmarks/``)."""
    with ReplayProcess(_coalesced_script(), tmp_path) as server:
        cfg = LoadConfig(base_url=server.url, api=Api.COMPLETIONS, model="m", concurrency=1, ignore_eos=True,
                         fixed_output=True)
        result = loadgen_run(config=cfg, specs=[RequestSpec(prompt="hi", input_len=IN_LEN, output_len=OUT_LEN)] * 10)
    run = BenchmarkRun(status=RunStatus.DONE, concurrency=1, input_len=IN_LEN, output_len=OUT_LEN, num_requests=10,
                       num_gpus=num_gpus, served_model_name="sim-model")
    _store_summary(run, run_summary(result))
    run.save()
    path = records_dir() / f"run-{run.pk}.npz"
    result.records.save(path)
    run.records_path = str(path)
    run.save()
    return run


def _coalesced_note(run: BenchmarkRun, ranked: str = "; it is not ranked for TTFT, TPOT and ITL (any statistic)") -> str:
    pct = f"{100.0 * run.summary['itl_zero_gap_fraction']:.0f} %"
    return (f"run #{run.pk}: {pct} of its gaps between output events are zero (tokens arrive in batches, several in "
            "one network read): its TTFT is the arrival of the first batch, not of the first token, and its TPOT "
            f"and ITL are per-event averages, not per-step{ranked}")


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.django_db(transaction=True)
def test_compare_names_a_run_with_coalesced_events_and_does_not_crown_its_tpot_or_ttft(
        steady_sim_url: str, operator, viewer, viewer_api, tmp_path: Path) -> None:
    deployment = sim_deployment_create(base_url=steady_sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [1], "lengths": f"{IN_LEN}:{OUT_LEN}", "requests": 10})
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
    [steady] = sweep.runs.all()
    batched = _coalesced_run(tmp_path, num_gpus=steady.num_gpus)

    # The first run's: 8 of every 31 gaps are zero, flagged; its mean TPOT (23 steps spread over 31
    # tokens, about 3.7 ms) is below the 5 ms step it was written at, and the sim run's 50 ms.
    assert "itl_coalesced" in batched.flags and "itl_coalesced" not in steady.flags
    assert "tokens_estimated" not in batched.flags and "output_length_mismatch" not in batched.flags
    assert batched.summary["itl_zero_gap_fraction"] >= (BATCHED - 1) / (OUT_LEN - 1) - 1e-9
    assert batched.summary["decode_steps"] is None
    tpot_batched, tpot_steady = batched.summary["tpot_s"]["mean"], steady.summary["tpot_s"]["mean"]
    assert tpot_batched < STEP_S <= tpot_steady * 1.02, (tpot_batched, tpot_steady)

    body = viewer_api.get(f"/api/runs/compare/?ids={batched.pk},{steady.pk}").json()
    assert [r["rankable"] for r in body["runs"]] == [True, True]
    assert _coalesced_note(batched) in body["notes"]
    # The lower TPOT is the artefact: the best for the metrics its client could not time is the other run.
    fields = {f["key"]: f["values"] for f in body["fields"]}
    assert fields["tpot_ms.mean"][0] < fields["tpot_ms.mean"][1]
    assert body["best"]["tpot_ms.mean"] == steady.pk and body["best"]["ttft_ms.p99"] == steady.pk
    # Its throughput stands: it is ranked for it (best, or tied with the sim run).
    assert (body["best"]["output_throughput_tok_s"] in (batched.pk, steady.pk)
            or batched.pk in body["ties"]["output_throughput_tok_s"])
    assert not any("output throughput" in n for n in body["notes"] if n.startswith(f"run #{batched.pk}:"))

    # The page says it with the other notes.
    html = logged_in_client(viewer).get(reverse("benchmarks:compare"),
                                        {"runs": f"{batched.pk},{steady.pk}"}).content.decode()
    assert _coalesced_note(batched).replace("run #", "Run #", 1) + "." in html.replace("&#x27;", "'")

    # Two such runs: neither is crowned for TPOT or TTFT, and the notes say why.
    again = _coalesced_run(tmp_path, num_gpus=steady.num_gpus)
    both = runs_compare(runs=[batched, again])
    assert both["best"]["tpot_ms.mean"] is None and both["best"]["ttft_ms.p99"] is None
    for key, label in (("ttft_ms.p99", "TTFT p99"), ("tpot_ms.mean", "TPOT mean")):
        assert (f"no best run for {label}: every rankable run with a value for it (#{batched.pk}, #{again.pk}) "
                "has one the client could not time (see the note on each)") in both["notes"], key
    assert _coalesced_note(batched) in both["notes"] and _coalesced_note(again) in both["notes"]


def _stored(sweep: BenchmarkSweep, ordinal: int, *, ttft_p99_s: float, tpot_mean_s: float, tok_s: float,
            flags: dict[str, bool], **extra) -> BenchmarkRun:
    summary = {"requests": 64, "successes": 64, "failures": 0, "duration_s": 20.0, "output_throughput_tok_s": tok_s,
               "ttft_s": {"mean": ttft_p99_s / 2, "p50": ttft_p99_s / 2, "p99": ttft_p99_s},
               "tpot_s": {"mean": tpot_mean_s, "p99": tpot_mean_s * 1.5}, "flags": flags, **extra}
    run = BenchmarkRun(sweep=sweep, ordinal=ordinal, status=RunStatus.DONE, concurrency=16, input_len=256,
                       output_len=256, num_requests=64, num_gpus=1)
    _store_summary(run, summary)
    run.save()
    return run


@pytest.mark.django_db
def test_compare_leaves_a_cpu_bound_client_out_of_the_latency_ranking_only() -> None:
    # Stored summaries as the load generator writes them: the flag with its figure.
    sweep = BenchmarkSweep.objects.create(name="cpu", status=SweepStatus.DONE)
    busy = _stored(sweep, 0, ttft_p99_s=0.08, tpot_mean_s=0.010, tok_s=1500.0,
                   flags={"client_cpu_bound": True}, client_cpu_fraction_max=0.97)
    calm = _stored(sweep, 1, ttft_p99_s=0.12, tpot_mean_s=0.012, tok_s=1200.0, flags={"client_cpu_bound": False},
                   client_cpu_fraction_max=0.31)
    out = runs_compare(runs=[busy, calm])
    assert (f"run #{busy.pk}: a load-generator worker was busy on CPU for 97 % of the run: its latencies (TTFT, "
            "TPOT, ITL, E2E) may include the client's own time; it is not ranked for TTFT, TPOT, ITL and E2E (any "
            "statistic)") in out["notes"]
    assert {k: out["best"][k] for k in ("output_throughput_tok_s", "tok_s_per_gpu", "ttft_ms.mean", "ttft_ms.p50",
                                        "ttft_ms.p99", "tpot_ms.mean", "tpot_ms.p99")} == {
        "output_throughput_tok_s": busy.pk, "tok_s_per_gpu": busy.pk, "ttft_ms.mean": calm.pk, "ttft_ms.p50": calm.pk,
        "ttft_ms.p99": calm.pk, "tpot_ms.mean": calm.pk, "tpot_ms.p99": calm.pk}
    # A run that is not ranked at all is still named, without a ranking clause.
    unranked = _stored(sweep, 2, ttft_p99_s=0.05, tpot_mean_s=0.009, tok_s=1600.0,
                       flags={"itl_coalesced": True, "output_length_mismatch": True}, itl_zero_gap_fraction=0.4)
    notes = runs_compare(runs=[calm, unranked])["notes"]
    assert _coalesced_note(unranked, ranked="") in notes


# --- analysis: the pause share and the step it was measured against -------------------------------


def _llamacpp_summary(*, c: int, tok_s: float, tpot_ms: float, ttft_ms: float, steps: dict | None,
                      zero_gaps: float) -> dict:
    """A llama.cpp point at 64/64 as :func:`benchmarks.loadgen.run_summary` stores it (seconds), of
    16 x c requests (enough to compare: MIN_COMPARED_REQUESTS)."""
    n = 16 * c
    e2e_s = (ttft_ms + 63 * tpot_ms) / 1000

    def dist(mean_s: float) -> dict:
        return {"mean": mean_s, "std": mean_s * 0.05, "p50": mean_s, "p90": mean_s * 1.1, "p99": mean_s * 1.2,
                "count": n}

    coalesced = steps is None
    return {"requests": n, "successes": n, "failures": 0, "duration_s": n * 64 / tok_s,
            "output_throughput_tok_s": tok_s, "request_throughput_req_s": tok_s / 64,
            "ttft_s": dist(ttft_ms / 1000), "tpot_s": dist(tpot_ms / 1000), "e2e_s": dist(e2e_s),
            "itl_s": dist(tpot_ms / 1000), "itl_kind": "per_event", "itl_zero_gap_fraction": zero_gaps,
            "decode_steps": steps,
            "decode_steps_note": (f"{zero_gaps:.0%} of {n * 63:,} gaps between output events are zero (events "
                                  "that came in one network read): the client did not see the token cadence"
                                  if coalesced else None),
            "input_tokens_actual_mean": 64.0, "output_tokens_mean": 64.0,
            "flags": {"itl_coalesced": coalesced, "tokens_estimated": False, "output_length_mismatch": False}}


@pytest.mark.django_db
def test_a_pause_finding_quotes_the_measured_step_and_only_coalesced_points_fall_back_to_tpot() -> None:
    # A first llama.cpp sweep: at c=1 the client saw a 1.5 ms step with pauses adding 35 % of
    # decode time (mean TPOT 2.3 ms = 1.5 / (1 - 0.35)); at c=4 and c=8 the events came in network
    # reads, so those two points, and only they, fall back to Little's law on TPOT.
    sweep = BenchmarkSweep.objects.create(name="llama", status=SweepStatus.DONE, topology="single", num_gpus=1,
                                          engine="llamacpp", served_model_name="tiny")
    c1_steps = {"basis": "per_event", "gaps": 252, "step_s": 0.0015, "step_p50_s": 0.00148, "batch_mean": 1.0,
                "stall_gaps": 61, "stall_share": 0.35, "stall_factor": 2.0}
    points = [(1, 252.2, 2.3, 109.0, c1_steps, 0.02), (4, 700.0, 4.1, 140.0, None, 0.41),
              (8, 900.0, 6.8, 210.0, None, 0.55)]
    for ordinal, (c, tok_s, tpot, ttft, steps, zero) in enumerate(points):
        run = BenchmarkRun(sweep=sweep, ordinal=ordinal, status=RunStatus.DONE, concurrency=c, input_len=64,
                           output_len=64, num_requests=16 * c, num_gpus=1)
        _store_summary(run, _llamacpp_summary(c=c, tok_s=tok_s, tpot_ms=tpot, ttft_ms=ttft, steps=steps,
                                              zero_gaps=zero))
        run.save()

    report = sweep_analyse(sweep=sweep)["lengths"]["64/64"]
    [pauses] = [f for f in report["findings"] if f.startswith("Decode pauses")]
    assert pauses == (
        "Decode pauses: decode paused between output events (gaps over twice the median step: another request's "
        "prefill ran, or the sequence waited) for 35% of decode time at c=1 (mean TPOT 2.3 ms against a 1.5 ms "
        "step); at c=1 no other request ran, so there the pauses are the engine's own or "
        "its output arriving in bursts, not prefill interference; mean TPOT includes these pauses, the decode "
        "step time does not.")
    # The sentence's numbers agree with each other: a 1.5 ms step plus 35 % pauses is a 2.3 ms TPOT.
    quoted = re.search(r"(\d+)% of decode time at c=1 \(mean TPOT ([\d.]+) ms against a ([\d.]+) ms", pauses)
    share, tpot, step = int(quoted[1]) / 100, float(quoted[2]), float(quoted[3])
    assert round(step / (1 - share), 1) == tpot
    assert "against a 2.3 ms step" not in " ".join(report["findings"])
    fit, c1 = report["fit"], report["points"][0]
    assert fit["batch_source"] == "mixed"
    assert fit["batch_sources"] == ["decode_events", "littles_law", "littles_law"]
    assert [p["running_batch_source"] for p in report["points"]] == ["decode_events", "littles_law", "littles_law"]
    # c=1: the measured batch and step; c=4: tok/s x TPOT = 700 x 4.1 ms = 2.87 sequences.
    assert fit["running_batch"] == [1.0, pytest.approx(700 * 4.1 / 1000), pytest.approx(900 * 6.8 / 1000)]
    # The fit's step at c=1 is the measured step; it and its pause share travel together.
    assert (c1["step_ms"], c1["decode_step_ms"], c1["stall_share"]) == (pytest.approx(1.5), pytest.approx(1.5), 0.35)
    assert [p["decode_step_ms"] for p in report["points"][1:]] == [None, None]


# --- charts: a request CDF from 0 on a 0-1 axis ---------------------------------------------------

MS = 1_000_000
T0 = 70_000_000_000


def _request(start_ms: int, events_ms: list[int], index: int) -> RequestOutcome:
    return RequestOutcome(
        scheduled=T0 + start_ms * MS, start=T0 + start_ms * MS, end=T0 + events_ms[-1] * MS + MS, index=index,
        events=array("q", [T0 + e * MS for e in events_ms]), event_tokens=array("H", [1] * len(events_ms)),
        output_tokens=len(events_ms), input_tokens=16, requested_input=16, requested_output=len(events_ms),
        http_status=200, ok=True, finish_reason="length")


HARNESS = r"""
const fs = require("fs"), vm = require("vm");
const uPlot = require(process.argv[1] + "/node_modules/uplot/dist/uPlot.cjs.js");
const sandbox = {window: {}, uPlot, document: {addEventListener() {}}, console, Math, JSON, Number, isFinite};
vm.createContext(sandbox);
vm.runInContext(fs.readFileSync(process.argv[1] + "/static/ceiling/charts.js", "utf8"), sandbox);
const C = sandbox.window.CeilingCharts;
const specs = JSON.parse(fs.readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(specs.map(spec => {
  const data = C.alignedData(spec.series), opts = C.buildOptions(spec, 600);
  const marks = opts.series.slice(1).map((s, i) => s.points.filter ? s.points.filter({data}, i + 1, s.points.show)
                                                                 : null);
  return {data: data.map(col => Array.from(col, v => v === undefined ? null : v)),
          y: opts.scales.y.range(null, 0.5, 1.0), marks};
})));
"""


def _drawn(specs: list[dict]) -> list[dict]:
    """What the real charts.js makes of ``specs``: uPlot's aligned columns (undefined as null), the
    y range it gives data from 0.5 to 1.0 and, per series, the indices it marks (null: none)."""
    done = subprocess.run([NODE, "-e", HARNESS, str(REPO)], input=json.dumps(specs), capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed (make demo installs it for npm)")
@pytest.mark.django_db
def test_a_two_request_cdf_starts_at_zero_on_a_zero_to_one_axis(viewer) -> None:
    sweep = BenchmarkSweep.objects.create(name="cdf", status=SweepStatus.DONE, num_gpus=1)
    store = RecordStore()
    store.add(_request(0, [120, 170, 220], 0))
    store.add(_request(300, [450, 520, 600], 1))
    run = BenchmarkRun.objects.create(sweep=sweep, status=RunStatus.DONE, concurrency=1, input_len=16, output_len=3,
                                      num_requests=2, num_gpus=1, summary={"requests": 2, "successes": 2},
                                      records_path=str(store.save(Path(records_dir()) / "two.npz")))
    html = logged_in_client(viewer).get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    specs = [json_script(html, f"chart-cdf-{stem}") for stem in ("ttft", "tpot", "e2e", "itl")]
    # The series keeps one point per sample (TTFT 120 and 150 ms); the axis is the fraction's 0-1.
    ttft, tpot, e2e, itl = specs
    assert ttft["series"][0]["points"] == [[120.0, 0.5], [150.0, 1.0]]
    assert all(s["y"]["min"] == 0.0 and s["y"]["max"] == 1.0 for s in specs)
    timeline = json_script(html, "chart-timeline")
    assert "min" not in timeline["y"] and "max" not in timeline["y"]  # only fractions get the fixed axis

    drawn = _drawn(specs)
    # Drawn from (first value, 0): the first request's rise to 0.5, then the second's to 1.0.
    assert drawn[0]["data"] == [[120.0, 120.0, 150.0], [0, 0.5, 1.0]]
    assert drawn[1]["data"] == [[50.0, 50.0, 75.0], [0, 0.5, 1.0]]
    assert drawn[2]["data"] == [[220.0, 220.0, 300.0], [0, 0.5, 1.0]]
    # Gaps of 50, 50, 70 and 80 ms: two equal values are one rise, to the larger fraction.
    assert itl["series"][0]["points"] == [[50.0, 0.25], [50.0, 0.5], [70.0, 0.75], [80.0, 1.0]]
    assert drawn[3]["data"] == [[50.0, 50.0, 70.0, 80.0], [0, 0.5, 0.75, 1.0]]
    assert [d["y"] for d in drawn] == [[0.0, 1.0]] * 4
    assert [d["marks"] for d in drawn] == [[None]] * 4  # a curve: no markers


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed (make demo installs it for npm)")
def test_a_one_sample_cdf_is_a_marked_rise_from_zero() -> None:
    import numpy as np

    from benchmarks.views.charts import cdf_chart

    spec = cdf_chart(np.array([120.0]), label="TTFT", empty="no successful requests.")
    assert spec["series"][0]["points"] == [[120.0, 1.0]] and spec["y"]["min"] == 0.0 and spec["y"]["max"] == 1.0
    [drawn] = _drawn([spec])
    # A vertical rise from 0 to 1.0 at 120 ms, marked at the sample only.
    assert drawn["data"] == [[120.0, 120.0], [0, 1.0]] and drawn["marks"] == [[1]]


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed (make demo installs it for npm)")
def test_overlaid_cdfs_each_start_at_zero_and_other_charts_keep_their_range() -> None:
    from benchmarks.views.charts import chart_spec

    overlay = chart_spec(title="TTFT CDF per run", x=("TTFT", "ms"), y=("fraction of requests", ""), series=[
        {"label": "run #1", "points": [[100.0, 0.5], [200.0, 1.0]], "step": True},
        {"label": "run #2", "points": [[150.0, 0.25], [200.0, 0.75], [300.0, 1.0]], "step": True}])
    tok = chart_spec(title="tok/s", x=("concurrency", "requests"), y=("output", "tok/s"),
                     series=[{"label": "256/256", "points": [[1, 100.0], [8, 400.0]]}], x_log=True)
    assert overlay["y"] == {"label": "fraction of requests", "unit": "", "log": False, "min": 0.0, "max": 1.0}
    drawn_overlay, drawn_tok = _drawn([overlay, tok])
    # Each run's smallest value has a slot for its 0 before its first fraction; 200 ms holds both.
    assert drawn_overlay["data"] == [[100.0, 100.0, 150.0, 150.0, 200.0, 300.0],
                                     [0, 0.5, None, None, 1.0, None],
                                     [None, None, 0, 0.25, 0.75, 1.0]]
    assert drawn_overlay["y"] == [0.0, 1.0] and drawn_overlay["marks"] == [None, None]
    assert drawn_tok["data"] == [[1, 8], [100.0, 400.0]]
    assert drawn_tok["y"] != [0.0, 1.0]  # uPlot's own range around the data


# --- manage.py sweep: every grid field ----------------------------------------------------------------


@pytest.mark.django_db
def test_the_sweep_command_refuses_a_bad_grid_value_naming_the_option() -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", recipe_name="cli-bad")
    cases = [
        (["--seed", "-1"], "  --seed (grid.seed): must be an integer 0..2^31-1, got -1"),
        (["--slo-ttft", "0"], "  --slo-ttft (grid.slo.ttft_s): must be seconds > 0, got 0"),
        (["--slo-e2e", "nan"], "  --slo-e2e (grid.slo.e2e_s): must be a finite number, got nan (not a number)"),
        (["--wait-ready", "90000"], "  --wait-ready (grid.wait_ready_s): must be seconds 0..86400, got 90000"),
        (["--request-rates", "2,-1", "--requests", "8"],
         "  --request-rates (grid.request_rates.1): must be a number of requests/s > 0, got -1"),
        (["--request-rates", "2"], "  --requests (grid.requests): open-loop points (--request-rates) need "
                                   "--requests or --duration"),
    ]
    for args, line in cases:
        with pytest.raises(CommandError) as exc:
            call_command("sweep", "cli-bad", "--lengths", "16:8", *args, stdout=io.StringIO())
        assert str(exc.value).split("\n") == ["the sweep grid is refused:", line], args
    # Every error at once, one per line.
    with pytest.raises(CommandError) as exc:
        call_command("sweep", "cli-bad", "--lengths", "16:8", "--seed", "-1", "--slo-tpot", "-0.1",
                     stdout=io.StringIO())
    assert str(exc.value).split("\n")[1:] == ["  --slo-tpot (grid.slo.tpot_s): must be seconds > 0, got -0.1",
                                              "  --seed (grid.seed): must be an integer 0..2^31-1, got -1"]
    # A value that is not an integer is the grid's to refuse, in the API's words, by option name too.
    with pytest.raises(CommandError) as exc:
        call_command("sweep", "cli-bad", "--lengths", "16:8", "--seed", "1.5", stdout=io.StringIO())
    assert str(exc.value).split("\n")[1:] == ["  --seed (grid.seed): must be an integer 0..2^31-1, got 1.5"]
    # An item of a list that is no number is named at its index like any other bad grid value.
    with pytest.raises(CommandError) as exc:
        call_command("sweep", "cli-bad", "--request-rates", "2,x", "--requests", "8", stdout=io.StringIO())
    assert str(exc.value).split("\n")[1:] == [
        '  --request-rates (grid.request_rates.1): must be a number of requests/s > 0, got the string "x"']
    assert not deployment.sweeps.exists()


@pytest.mark.django_db
def test_the_sweep_command_stores_every_grid_field_the_api_takes() -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", recipe_name="cli-good",
                                       status=DeploymentStatus.STARTING)
    out = io.StringIO()
    call_command("sweep", "cli-good", "--concurrency", "1,4", "--request-rates", "2,4.5", "--requests", "8",
                 "--lengths", "16:8", "--slo-ttft", "0.5", "--slo-tpot", "0.05", "--slo-e2e", "3", "--seed", "7",
                 "--wait-ready", "30", stdout=out)
    sweep = deployment.sweeps.get()
    assert {k: sweep.grid[k] for k in ("concurrency", "request_rates", "requests", "slo", "seed", "wait_ready_s")} == {
        "concurrency": [1, 4], "request_rates": [2.0, 4.5], "requests": 8,
        "slo": {"ttft_s": 0.5, "tpot_s": 0.05, "e2e_s": 3.0}, "seed": 7, "wait_ready_s": 30.0}
    assert out.getvalue() == f"sweep #{sweep.pk} created: 4 points, 32 requests\n"


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.django_db(transaction=True)
def test_the_sweep_command_runs_an_open_loop_point_with_an_slo(sim_url: str) -> None:
    # Rates without --concurrency: only the open-loop point, measured against the SLO given.
    deployment = sim_deployment_create(base_url=sim_url, recipe_name="cli-rate")
    call_command("sweep", "cli-rate", "--request-rates", "20", "--requests", "8", "--lengths", "16:8",
                 "--slo-ttft", "10", "--seed", "3", "--here", stdout=io.StringIO())
    sweep = deployment.sweeps.get()
    assert sweep.status == SweepStatus.DONE and sweep.grid["concurrency"] == [] and sweep.grid["seed"] == 3
    [run] = sweep.runs.all()
    assert (run.concurrency, run.request_rate) == (None, 20.0)
    assert run.summary["slo"] == {"ttft_s": 10.0, "tpot_s": None, "e2e_s": None}
    assert run.summary["slo_attainment"] == 1.0 and run.summary["successes"] == 8
