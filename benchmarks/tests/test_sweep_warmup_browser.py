"""The sweep page's live panel in a real browser (the Debian chromium package through Playwright)
while a real sweep's point warms up against a real sim engine slowed down so its warm-up spans
several reports: the panel says ``warming up: N / 3 warm-up requests`` as they end, its bar
follows them, nothing of the point's measured counts shows beside it, and the measured phase's
counts replace it once the measured requests go out.

The sweep runs in a thread of the test; its ``sweep.progress`` messages are the ones it
broadcasts, carried to the page over a routed /ws/live/ the test speaks for (the page's polled
status block reads the same rows meanwhile)."""
from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.choices import SweepStatus
from benchmarks.loadgen.driver import WARMUP_PHASE
from benchmarks.services import sweep_create, sweep_execute
from benchmarks.services import sweeps as sweep_service
from benchmarks.tests.sweep_support import sim_deployment_create, sim_start
from benchmarks.tests.test_sweep_live_browser import _SAMPLER, PANEL, _open_sweep_page
from controlplane.tests.browser.conftest import browser  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180),
              pytest.mark.django_db(transaction=True)]

WARMUP, REQUESTS = 3, 2


@pytest.fixture
def slow_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A sim engine ten times slower than its profile: a 32:8 request takes about half a second,
    so three warm-up requests one after another span several of the load generator's reports."""
    base, proc = sim_start(tmp_path_factory.mktemp("sim") / "sim.log", time_scale=10.0)
    yield base
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def warming(slow_sim: str, operator, settings, tmp_path: Path, monkeypatch) -> dict:
    """A pending one-point sweep with 3 warm-up requests and 2 measured ones on the slowed sim,
    made before the browser starts (Playwright's sync API runs an event loop in this thread, where
    Django refuses database calls), and a queue its broadcasts go to as well."""
    settings.VAR_DIR = tmp_path
    settings.CEILING_REALTIME_MIN_INTERVAL_S = 0.0
    deployment = sim_deployment_create(base_url=slow_sim)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"api": "openai-completions", "concurrency": [1], "lengths": ["32:8"],
                               "requests": REQUESTS, "warmup": WARMUP})
    sent: queue.Queue = queue.Queue()
    broadcast = sweep_service._broadcast

    def forward(sweep_id, kind, data, **kwargs) -> None:
        sent.put((kind, json.loads(json.dumps(sweep_service.json_safe(data)))))
        broadcast(sweep_id, kind, data, **kwargs)

    monkeypatch.setattr(sweep_service, "_broadcast", forward)
    return {"sweep_id": sweep.pk, "sent": sent}


def test_the_live_panel_draws_the_warmup_as_it_runs_then_the_measured_requests(
        live_server, warming, admin_user, browser) -> None:  # noqa: F811
    sweep_id, sent = warming["sweep_id"], warming["sent"]
    page, ws = _open_sweep_page(live_server, admin_user, browser, sweep_id)
    page.evaluate(_SAMPLER)
    result: dict = {}

    def execute() -> None:
        result["status"] = sweep_execute(sweep_id=sweep_id)

    thread = threading.Thread(target=execute)
    thread.start()
    messages: list[dict] = []
    # Each broadcast goes to the page as the socket would carry it, and what the panel then draws
    # is kept with the message it followed.
    drawn: list[tuple[dict, str, str]] = []
    deadline = time.monotonic() + 120
    try:
        while thread.is_alive() or not sent.empty():
            assert time.monotonic() < deadline, "the sweep did not end in time"
            try:
                kind, data = sent.get(timeout=0.05)
            except queue.Empty:
                page.wait_for_timeout(20)
                continue
            messages.append({"type": kind, **data})
            ws.send(json.dumps({"type": kind, "seq": len(messages), "group": f"sweep-{sweep_id}",
                                "ts": time.time(), "data": data}))
            if kind == "sweep.progress":
                expected = (f"{WARMUP_PHASE}: {data['warmup_done']} / {WARMUP} warm-up requests"
                            if data.get("phase") == WARMUP_PHASE else f"{data['done']} / {data['total']}"
                            if "done" in data else None)
                if expected:
                    page.wait_for_function("([sel, text]) => document.querySelector(sel).innerText.includes(text)",
                                           arg=[PANEL, expected], timeout=10_000, polling=20)
                    drawn.append((data, page.inner_text(PANEL),
                                  page.evaluate(f"() => document.querySelector('{PANEL} [data-f=fill]').style.width")))
    finally:
        thread.join(timeout=60)
    assert result.get("status") == SweepStatus.DONE, result

    progress = [m for m in messages if m["type"] == "sweep.progress"]
    warm = [m for m in progress if m.get("phase") == WARMUP_PHASE]
    measured = [m for m in progress if "done" in m and "phase" not in m]
    assert warm and measured, progress
    # The warm-up was reported while it ran (some of its requests still to end), then the measured phase.
    assert any(m["warmup_done"] < WARMUP for m in warm), warm
    assert progress.index(warm[-1]) < progress.index(measured[0])

    warm_drawn = [(d, text, width) for d, text, width in drawn if d.get("phase") == WARMUP_PHASE]
    for d, text, width in warm_drawn:
        line = f"{WARMUP_PHASE}: {d['warmup_done']} / {WARMUP} warm-up requests, {d['warmup_elapsed_s']:.1f} s elapsed"
        assert line in text, (line, text)
        # No request of the point was sent yet: no measured count, rate or elapsed time beside it.
        assert "tok/s" not in text.replace("Output tok/s", ""), text
        assert f"/ {REQUESTS}\n" not in text, text
        # Its bar follows the warm-up requests.
        assert float(width.rstrip("%")) == pytest.approx(100 * d["warmup_done"] / WARMUP, abs=0.05), (width, d)

    frames = page.evaluate("() => window.frames_")
    live = [f["live"] for f in frames]
    first_warm = next(i for i, t in enumerate(live) if "warm-up requests" in t)
    first_measured = next(i for i, t in enumerate(live) if f"/ {REQUESTS}" in t and "warm-up" not in t)
    assert first_warm < first_measured, live
    # The status block above never repeated the phase while the panel showed it.
    for f in frames[first_warm:first_measured]:
        assert "warm-up" not in f["status"], f
    # Once the measured requests are drawn the warm-up never comes back.
    for t in live[first_measured:]:
        assert "warm-up" not in t and WARMUP_PHASE not in t, t
    last_measured = measured[-1]
    assert last_measured["done"] == last_measured["total"] == REQUESTS and last_measured["requests_done"] == REQUESTS
    assert any(f"{REQUESTS} / {REQUESTS}" in t for t in live[first_measured:]), live[first_measured:]
