"""A stop that a load-generator worker ignores loses nothing: the worker is given up on after
``STOP_RESULTS_S``, every request it had completed is kept, and the requests it had in flight are
recorded as aborted (failed, no tokens), not lost and not counted as successes; the stop returns
in bounded time.

Against a real ``sim`` engine slowed down (``--time-scale``) so that requests are in flight when
the stop comes, and real worker processes: one of them is frozen with SIGSTOP, so it cannot
answer the stop at all."""
from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
import numpy as np
import pytest

from benchmarks.loadgen import Api, LoadConfig, LoadgenStopped, loadgen_run, random_dataset, run_summary
from benchmarks.loadgen import driver
from benchmarks.tests.sweep_support import sim_start

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

# demo-fast slowed down 4x: a 48-token request takes about a second.
TIME_SCALE = 4.0
OUTPUT_LEN = 48


@pytest.fixture(scope="module")
def slow_sim_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real sim engine process, ``--time-scale`` 4, for the module."""
    base, proc = sim_start(tmp_path_factory.mktemp("slow-sim") / "sim.log", time_scale=TIME_SCALE)
    yield base
    proc.terminate()
    proc.wait(timeout=10)


def _indices_by_worker(records) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i, w in zip(records.column("index").tolist(), records.column("worker").tolist()):
        out.setdefault(int(w), []).append(int(i))
    return out


def test_it_keeps_every_record_of_a_worker_that_ignores_the_stop(slow_sim_url: str, monkeypatch) -> None:
    monkeypatch.setattr(driver, "STOP_RESULTS_S", 3.0)  # the give-up delay; the rule is the same at 10 s
    specs = random_dataset(num=200, input_len=16, output_len=OUTPUT_LEN, seed=5)
    cfg = LoadConfig(base_url=slow_sim_url, api=Api.GENERATE, model="sim-model", concurrency=4, workers=2,
                     ignore_eos=True, fixed_output=True)
    frozen: list[int] = []
    times: dict[str, float] = {}

    def progress(info: dict) -> None:
        if not frozen and info["done"] >= 6:
            child = multiprocessing.active_children()[0]
            os.kill(child.pid, signal.SIGSTOP)  # this worker will not answer anything any more
            frozen.append(child.pid)
            times["frozen"] = time.monotonic()

    def should_stop() -> str | None:
        # A second after the freeze the frozen worker's requests have finished at the server, but
        # it never read them: they must come back as aborted, not as successes.
        if frozen and time.monotonic() - times["frozen"] > 1.0:
            times.setdefault("stop", time.monotonic())
            return "the sweep was cancelled"
        return None

    try:
        with pytest.raises(LoadgenStopped) as info:
            loadgen_run(config=cfg, specs=specs, progress=progress, should_stop=should_stop)
    finally:
        for pid in frozen:  # the run kills it; this only covers a failing assertion above
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    took = time.monotonic() - times["stop"]
    assert took < driver.STOP_RESULTS_S + 3.0, f"the stop took {took:.1f} s"

    result = info.value.result
    assert result is not None and result.halted == "the sweep was cancelled"
    (lost_worker,) = result.unanswered_workers
    assert "did not answer the stop" in str(info.value) and "records up to then are kept" in str(info.value)
    rec = result.records
    ok = rec.column("ok").astype(bool)
    aborted = np.array([rec.errors.get(i, "").startswith("aborted: the sweep was cancelled") for i in range(len(rec))],
                       dtype=bool)
    workers = rec.column("worker")

    # Nothing lost: each worker sends its share of the dataset in order, so the requests it sent
    # are a prefix of its share, and every one of them is in the records exactly once.
    for worker, indices in _indices_by_worker(rec).items():
        share = list(range(len(specs)))[worker::2]
        assert sorted(indices) == share[:len(indices)], f"worker {worker} lost records"
    frozen_ok = int((ok & (workers == lost_worker)).sum())
    frozen_aborted = int((aborted & (workers == lost_worker)).sum())
    assert frozen_ok >= 1, "the frozen worker's completed requests were dropped"
    # Its two slots were busy at the freeze: both requests are recorded as aborted, ending at the
    # stop, with no output; none of them counts as a success.
    assert frozen_aborted == 2
    assert not (ok & aborted).any()
    assert (rec.column("output_tokens")[aborted & (workers == lost_worker)] == -1).all()
    assert (rec.column("end")[aborted] >= rec.column("start")[aborted]).all()
    # Every successful request is a whole one (fixed length), so none of the aborted ones slipped in.
    assert (rec.column("output_tokens")[ok] == OUTPUT_LEN).all()

    summary = run_summary(result)
    assert summary["successes"] == int(ok.sum()) and summary["aborted"] == int(aborted.sum())
    assert summary["failures"] == 0 and summary["requests"] == summary["successes"] + summary["aborted"]
    assert summary["unanswered_workers"] == [lost_worker] and summary["not_sent"] is None
    assert summary["halted"] == "the sweep was cancelled"
    stats = {w.worker: w for w in result.workers}
    assert stats[lost_worker].unanswered and stats[lost_worker].requests == int((workers == lost_worker).sum())
    assert not stats[1 - lost_worker].unanswered


def test_it_still_hands_back_every_record_when_every_worker_answers(slow_sim_url: str) -> None:
    specs = random_dataset(num=12, input_len=16, output_len=8, seed=6)
    cfg = LoadConfig(base_url=slow_sim_url, api=Api.GENERATE, model="sim-model", concurrency=4, workers=2,
                     ignore_eos=True, fixed_output=True)
    result = loadgen_run(config=cfg, specs=specs)
    assert len(result.records) == 12 and int(result.records.column("ok").sum()) == 12
    assert sorted(result.records.column("index").tolist()) == list(range(12))
    assert result.unanswered_workers == [] and run_summary(result)["aborted"] == 0
