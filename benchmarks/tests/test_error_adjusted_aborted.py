"""Requests a stop aborted in flight are neither successes nor failures of the server: the
error-adjusted percentiles leave them out (only the server's failures count as +inf), and a run
whose every request was aborted is flagged ``all_requests_aborted`` (none completed), never
``no_successful_requests`` ("every request failed"). Summaries built from hand-made records."""
from __future__ import annotations

import csv
import importlib
import io
import math
from dataclasses import replace
from pathlib import Path

import pytest
from django.apps import apps
from django.urls import reverse

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.loadgen import run_summary
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import run_export_csv, run_metrics
from benchmarks.tests.page_support import logged_in_client
from benchmarks.tests.sweep_support import sim_deployment_create
from benchmarks.tests.test_loadgen_metrics import req, result_of
from controlplane.jsonsafe import json_safe
from deployments.choices import DeploymentStatus

ABORT = "aborted: the sweep was cancelled"


def aborted(start_ms: int, end_ms: int):
    return replace(req(start_ms, [], end_ms, 0, ok=False), error=ABORT)


def test_aborted_requests_are_left_out_of_the_error_adjusted_percentiles() -> None:
    s = run_summary(result_of([req(0, [100, 200], 300, 2), req(0, [200, 300], 400, 2),
                               aborted(0, 8000), aborted(0, 8000)]))
    assert (s["failures"], s["aborted"]) == (0, 2)  # requests = successes + failures + aborted
    adj = s["error_adjusted"]
    assert (adj["failures"], adj["aborted"], adj["infinite"]) == (0, 2, [])
    assert adj["ttft_s"]["p99"] == pytest.approx(0.2) and adj["e2e_s"]["p50"] == pytest.approx(0.2) and adj["e2e_s"]["p99"] == pytest.approx(0.3)
    assert s["flags"]["no_successful_requests"] is False and s["flags"]["all_requests_aborted"] is False


def test_only_the_server_failures_count_as_infinite_beside_aborted_ones() -> None:
    s = run_summary(result_of([req(0, [100, 200], 300, 2), req(0, [], 50, 0, ok=False),
                               aborted(0, 8000), aborted(0, 8000)]))
    adj = s["error_adjusted"]
    assert (adj["failures"], adj["aborted"]) == (1, 2)
    # two ranked values (0.1, +inf): p50 is the success, p90 and p99 the failure
    assert adj["ttft_s"]["p50"] == pytest.approx(0.1) and adj["ttft_s"]["p90"] == math.inf
    assert adj["infinite"] == ["e2e_s.p90", "e2e_s.p99", "ttft_s.p90", "ttft_s.p99"]


def test_a_run_whose_every_request_was_aborted_is_not_said_to_have_failed() -> None:
    s = run_summary(result_of([aborted(0, 8000), aborted(0, 8000)]))
    assert s["flags"]["no_successful_requests"] is False and s["flags"]["all_requests_aborted"] is True
    adj = s["error_adjusted"]
    assert (adj["failures"], adj["aborted"], adj["infinite"]) == (0, 2, [])
    stored = json_safe(s)["error_adjusted"]
    assert stored["ttft_s"] == {"p50": None, "p90": None, "p99": None}  # nothing to rank, not infinite
    assert stored["e2e_s"] == {"p50": None, "p90": None, "p99": None}


def test_no_success_with_a_server_failure_beside_aborted_ones_is_no_successful_requests() -> None:
    s = run_summary(result_of([req(0, [], 50, 0, ok=False), aborted(0, 8000)]))
    assert s["flags"]["no_successful_requests"] is True and s["flags"]["all_requests_aborted"] is False
    assert s["error_adjusted"]["failures"] == 1 and s["error_adjusted"]["infinite"] == [
        f"{m}.p{p}" for m in ("e2e_s", "ttft_s") for p in (50, 90, 99)]


@pytest.fixture
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


def _run(summary: dict, flags: list[str]) -> BenchmarkRun:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STOPPED)
    sweep = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.CANCELLED, num_gpus=1)
    return BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.CANCELLED, concurrency=2,
                                       input_len=16, output_len=16, num_gpus=1, flags=flags, summary=summary)


@pytest.mark.django_db
def test_the_run_page_of_an_all_aborted_run_shows_no_infinite_latency(_var_dir, viewer) -> None:
    s = json_safe(run_summary(result_of([aborted(0, 8000), aborted(0, 8000)])))
    run = _run(s, sorted(k for k, v in s["flags"].items() if v))
    assert run.flags == ["all_requests_aborted"]
    html = logged_in_client(viewer).get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    assert "∞ (failures)" not in html and "counted as ∞" not in html
    assert "no request of this run succeeded" not in html
    assert "no request of this run completed" in html


@pytest.mark.django_db
def test_the_run_page_leaves_aborted_requests_out_of_a_summary_stored_with_them_as_failures(
        _var_dir, viewer) -> None:
    # Stored before the error-adjusted view left aborted requests out: its count included them.
    s = json_safe(run_summary(result_of([aborted(0, 8000), aborted(0, 8000)])))
    s["failures"] = 2
    s["error_adjusted"] = {"ttft_s": {"p50": None, "p90": None, "p99": None},
                           "e2e_s": {"p50": None, "p90": None, "p99": None}, "failures": 2,
                           "infinite": [f"{m}.p{p}" for m in ("e2e_s", "ttft_s") for p in (50, 90, 99)]}
    html = logged_in_client(viewer).get(reverse("benchmarks:run-detail", args=[_run(s, []).pk])).content.decode()
    assert "∞ (failures)" not in html and "counted as ∞" not in html


@pytest.mark.django_db
def test_the_run_page_says_how_many_aborted_requests_the_error_adjusted_view_left_out(_var_dir, viewer) -> None:
    s = json_safe(run_summary(result_of([req(0, [100, 200], 300, 2), req(0, [], 50, 0, ok=False),
                                         aborted(0, 8000)])))
    html = logged_in_client(viewer).get(reverse("benchmarks:run-detail", args=[_run(s, []).pk])).content.decode()
    # the run was cancelled: its aborted requests are named as the cancel's
    assert "1 failed request counted as ∞, nearest rank; 1 aborted in flight by the cancel left out (not failures)" \
        in html


@pytest.mark.django_db
def test_the_run_page_shows_when_the_run_started_and_ended_in_utc(_var_dir, viewer) -> None:
    from datetime import datetime, timezone

    run = _run({"requests": 1, "successes": 1, "failures": 0}, [])
    run.started_at = datetime(2026, 12, 6, 13, 32, 24, tzinfo=timezone.utc)
    run.ended_at = datetime(2026, 12, 6, 13, 33, 5, tzinfo=timezone.utc)
    run.save(update_fields=["started_at", "ended_at"])
    html = logged_in_client(viewer).get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    assert ('<dt>Started</dt><dd class="run-started"><time datetime="2026-12-06T13:32:24Z" '
            'title="2026-12-06T13:32:24Z">2026-12-06 13:32:24 UTC</time></dd>') in html
    assert ('<dt>Ended</dt><dd class="run-ended"><time datetime="2026-12-06T13:33:05Z" '
            'title="2026-12-06T13:33:05Z">2026-12-06 13:33:05 UTC</time></dd>') in html
    run.ended_at = None
    run.save(update_fields=["ended_at"])
    html = logged_in_client(viewer).get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    assert "<dt>Ended</dt>" not in html


def streamed(start_ms: int, end_ms: int, tokens: int):
    """A request a stop aborted in flight after it had streamed ``tokens`` output tokens."""
    return replace(req(start_ms, [start_ms + 100, start_ms + 200], end_ms, tokens, ok=False), error=ABORT)


def test_a_run_whose_every_request_was_aborted_counts_what_they_streamed() -> None:
    # 2 requests aborted at 8 s after streaming 60 and 40 tokens: 100 tokens over 8 s.
    s = run_summary(result_of([streamed(0, 8000, 60), streamed(0, 8000, 40)]))
    assert s["flags"]["all_requests_aborted"] is True and (s["successes"], s["aborted"]) == (0, 2)
    assert (s["output_tokens"], s["output_tokens_aborted"], s["duration_s"]) == (0, 100, 8.0)
    assert s["output_throughput_basis"] == "completed_and_aborted"
    assert s["output_throughput_tok_s"] == pytest.approx(12.5)
    assert (s["output_throughput_completed_tok_s"], s["request_throughput_req_s"]) == (0.0, 0.0)
    assert s["total_token_throughput_tok_s"] is None
    assert s["ttft_s"]["p50"] is None and s["tpot_s"]["mean"] is None and s["e2e_s"]["p99"] is None


def test_no_throughput_without_streamed_tokens_or_beside_a_server_failure() -> None:
    nothing = run_summary(result_of([aborted(0, 8000), aborted(0, 8000)]))
    assert nothing["output_tokens_aborted"] == 0
    assert nothing["output_throughput_tok_s"] is None and nothing["output_throughput_completed_tok_s"] is None
    assert nothing["request_throughput_req_s"] is None
    failed = run_summary(result_of([req(0, [], 50, 0, ok=False), streamed(0, 8000, 60)]))
    assert failed["flags"]["no_successful_requests"] is True and failed["output_tokens_aborted"] == 60
    assert failed["output_throughput_tok_s"] is None and failed["request_throughput_req_s"] is None


@pytest.mark.django_db
def test_an_all_aborted_run_shows_what_its_requests_streamed_on_the_page_and_in_the_api(
        _var_dir, viewer, viewer_api) -> None:
    s = json_safe(run_summary(result_of([streamed(0, 8000, 60), streamed(0, 8000, 40)])))
    run = _run(s, sorted(k for k, v in s["flags"].items() if v))
    m = run_metrics(run=run)
    assert m["output_throughput_tok_s"] == pytest.approx(12.5) and m["output_tokens_aborted"] == 100
    assert m["output_throughput_basis"] == "completed_and_aborted"
    assert (m["output_throughput_completed_tok_s"], m["request_throughput_req_s"]) == (0.0, 0.0)
    assert m["total_token_throughput_tok_s"] is None and m["ttft_ms"]["p50"] is None
    body = viewer_api.get(f"/api/runs/{run.pk}/").json()["metrics"]
    assert body["output_throughput_tok_s"] == pytest.approx(12.5)
    assert (body["output_throughput_completed_tok_s"], body["request_throughput_req_s"]) == (0.0, 0.0)
    row = next(csv.DictReader(io.StringIO(run_export_csv(run=run))))
    assert (row["output_throughput_tok_s"], row["output_throughput_basis"]) == ("12.5", "completed_and_aborted")
    assert (row["output_throughput_completed_tok_s"], row["output_tokens_aborted"]) == ("0.0", "100")
    html = logged_in_client(viewer).get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    assert "incl. 100 tok streamed by the aborted requests" in html
    assert "its output throughput counts the tokens the aborted requests had streamed" in html


@pytest.mark.django_db
def test_an_all_aborted_run_stored_with_no_throughput_gets_what_its_requests_streamed(_var_dir) -> None:
    # Stored while such a point showed none: its summary kept null beside the streamed tokens.
    s = json_safe(run_summary(result_of([streamed(0, 8000, 60), streamed(0, 4000, 40)])))
    s.update(output_throughput_tok_s=None, output_throughput_completed_tok_s=None, request_throughput_req_s=None)
    run = _run(s, ["all_requests_aborted"])
    m = run_metrics(run=run)
    assert m["output_throughput_tok_s"] == pytest.approx(100 / 8.0)
    assert (m["output_throughput_completed_tok_s"], m["request_throughput_req_s"]) == (0.0, 0.0)
    # The sortable column the API gives as output_tok_s is filled in from the stored summary.
    assert run.output_tok_s is None
    importlib.import_module("benchmarks.migrations.0013_all_aborted_point_throughput").fill_in(apps, None)
    run.refresh_from_db()
    assert (run.output_tok_s, run.request_rate_achieved) == (pytest.approx(100 / 8.0), 0.0)
    # Without streamed tokens (or their count) nothing was measured: null, as before.
    run.summary = {**s, "output_tokens_aborted": 0}
    assert run_metrics(run=run)["output_throughput_tok_s"] is None
    run.summary = {k: v for k, v in s.items() if k != "output_tokens_aborted"}
    assert run_metrics(run=run)["output_throughput_tok_s"] is None
