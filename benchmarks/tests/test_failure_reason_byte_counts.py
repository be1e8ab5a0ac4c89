"""Failures that differ only in a per-request byte count are one kind of failure, and the words
shown for that kind give the real counts, never a placeholder: the one count the messages share
(``after 96 body bytes``) or the range of them (``after 120–4,096 body bytes``). In the summary's
``errors``, the reason of a point whose engine was killed mid-stream (the sweep's and the run's
reason), the reason of a point whose every request failed, the run and sweep pages and the API."""
from __future__ import annotations

import json
import re
from array import array

import pytest
from django.urls import reverse

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.loadgen import Api, LoadConfig, RecordStore, RequestOutcome, RunResult, WorkerStats, run_summary
from benchmarks.loadgen.metrics import ERROR_KEY_CHARS, error_kind
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.tests.page_support import logged_in_client as _client
from benchmarks.tests.sweep_support import sim_deployment_create

MS = 1_000_000
BODY = "server closed the connection inside the response body after {} body bytes"
EVENT = "stream ended inside an event ({} bytes unterminated) after {} body bytes"
# A placeholder where a count belongs: ``N bytes`` / ``N body bytes``.
PLACEHOLDER = re.compile(r"\bN (body )?bytes\b")


def _failed(start_ms: int, error: str) -> RequestOutcome:
    return RequestOutcome(scheduled=start_ms * MS, start=start_ms * MS, end=(start_ms + 40) * MS,
                          events=array("q"), event_tokens=array("H"), output_tokens=0, requested_output=64,
                          http_status=200, ok=False, error=error, finish_reason=None)


def _summary(errors: list[str]) -> dict:
    store = RecordStore()
    for i, error in enumerate(errors):
        store.add(_failed(i, error))
    cfg = LoadConfig(base_url="http://x", api=Api.GENERATE, model="m", concurrency=4)
    result = RunResult(records=store, config=cfg, t0=0, workers=[WorkerStats(0, MS, 100 * MS, 10, len(errors))])
    return run_summary(result)


def test_a_kind_of_failure_is_said_with_the_range_of_its_byte_counts() -> None:
    errors = [BODY.format(n) for n in (120, 4096, 300, 120)] + ["cannot connect to 127.0.0.1:9: refused"] * 3
    s = _summary(errors)
    assert s["errors"] == {BODY.format("120–4,096"): 4, "cannot connect to 127.0.0.1:9: refused": 3}


def test_a_kind_whose_messages_share_their_count_is_said_with_that_count() -> None:
    assert _summary([BODY.format(96)] * 4)["errors"] == {BODY.format(96): 4}
    assert _summary([BODY.format(12345)])["errors"] == {BODY.format("12,345"): 1}


def test_each_count_of_a_message_gets_its_own_range() -> None:
    errors = [EVENT.format(10, 1234), EVENT.format(3, 99), EVENT.format(3, 500)]
    assert _summary(errors)["errors"] == {EVENT.format("3–10", "99–1,234"): 3}
    # grouping is unchanged: one kind, keyed without the counts
    assert len({error_kind(e) for e in errors}) == 1


def test_a_long_reason_is_cut_without_a_placeholder_and_without_a_count_it_cannot_vouch_for() -> None:
    from benchmarks.loadgen.metrics import error_text

    head = "x" * 180
    errors = [f"{head} after 12345 body bytes, then {tail}" for tail in ("a" * 50, "b" * 50)]
    assert len({error_kind(e) for e in errors}) == 1
    text = error_text(errors)
    assert text == f"{head} after 12,345 body …" and len(text) == ERROR_KEY_CHARS
    # A range that no longer fits is left out rather than cut in the middle.
    errors = [f"{'y' * 190} after {n} body bytes and more" for n in (9, 12345)]
    text = error_text(errors)
    assert text == f"{'y' * 190} after …"
    assert not PLACEHOLDER.search(text)


@pytest.mark.django_db
def test_no_placeholder_reaches_the_reasons_pages_or_api(settings, tmp_path, viewer, viewer_api) -> None:
    from benchmarks.services.runs import _store_summary
    from benchmarks.services.sweeps import _all_failed_reason, _went_down_reason

    settings.VAR_DIR = tmp_path
    # The user's case: the sim killed with kill -9 while 8 requests at concurrency 4 were streaming.
    s = _summary([BODY.format(n) for n in (120, 4096, 512, 2048)] + ["cannot connect to 127.0.0.1:9: refused"] * 3
                 + [BODY.format(777)])
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    down = "single #0 killed by signal 9 (SIGKILL); restart policy is 'never'"
    reason = _went_down_reason(s, "c=4 64/64", deployment, down=down, healthy=None, health="")
    assert f"8 of 8 requests failed (commonest: 5 x {BODY.format('120–4,096')})" in reason, reason
    failed = _all_failed_reason(s, "c=4 64/64")
    assert f"(commonest: 5 x {BODY.format('120–4,096')}); nothing was measured" in failed, failed

    sweep = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.FAILED, points_total=1,
                                          points_done=1, grid={"concurrency": [4], "lengths": [[64, 64]]},
                                          reason=reason)
    run = BenchmarkRun(sweep=sweep, ordinal=0, status=RunStatus.FAILED, concurrency=4, input_len=64, output_len=64,
                       num_requests=8, reason=reason)
    _store_summary(run, s)
    run.save()

    client = _client(viewer)
    pages = [client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])).content.decode(),
             client.get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()]
    assert "120–4,096 body bytes" in pages[1]
    answers = [viewer_api.get(f"/api/runs/{run.pk}/"), viewer_api.get(f"/api/sweeps/{sweep.pk}/")]
    assert all(a.status_code == 200 for a in answers)
    texts = pages + [json.dumps(a.json(), ensure_ascii=False) for a in answers]
    assert BODY.format("120–4,096") in texts[2]
    for text in texts:
        assert not PLACEHOLDER.search(text), PLACEHOLDER.search(text)
