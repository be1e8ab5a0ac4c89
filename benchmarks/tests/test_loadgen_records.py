"""The per-request record store: add, merge, save and load."""
from __future__ import annotations

import tracemalloc
from array import array
from pathlib import Path

import numpy as np

from benchmarks.loadgen import RecordStore, RequestOutcome


def outcome(i: int, n_events: int = 3, ok: bool = True) -> RequestOutcome:
    events = array("q", [1_000 + i * 10 + k for k in range(n_events)])
    return RequestOutcome(scheduled=i, start=900 + i, end=2_000 + i, events=events,
                          event_tokens=array("H", [1] * n_events), output_tokens=n_events, input_tokens=7,
                          requested_input=8, requested_output=16, http_status=200, ok=ok,
                          finish_reason="length" if ok else None, error=None if ok else "no output")


def test_it_round_trips_through_a_compressed_npz(tmp_path: Path) -> None:
    store = RecordStore()
    for i in range(5):
        store.add(outcome(i, n_events=i, ok=i % 2 == 0), worker=1)
    path = store.save(tmp_path / "run.npz")
    back = RecordStore.load(path)
    assert len(back) == 5
    assert list(back.events_of(3)) == [1030, 1031, 1032]
    assert back.errors == {1: "no output", 3: "no output"}
    assert [back.finish_reason(i) for i in range(5)] == ["length", None, "length", None, "length"]
    assert list(back.column("output_tokens")) == [0, 1, 2, 3, 4]
    assert list(back.column("first")) == [-1, 1010, 1020, 1030, 1040]


def test_it_merges_worker_stores_with_rebased_event_offsets() -> None:
    a, b = RecordStore(), RecordStore()
    a.add(outcome(0, 2))
    b.add(outcome(1, 3), worker=1)
    b.add(outcome(2, 1, ok=False), worker=1)
    merged = RecordStore.merge([a, b])
    assert len(merged) == 3
    assert list(merged.events_of(1)) == [1010, 1011, 1012]
    assert list(merged.events_of(2)) == [1020]
    assert merged.errors == {2: "no output"}
    assert list(merged.column("worker")) == [0, 1, 1]


def test_it_holds_100k_requests_of_256_events_compactly(tmp_path: Path) -> None:
    tracemalloc.start()
    store = RecordStore()
    events = array("q", range(256))
    tokens = array("H", [1] * 256)
    for i in range(100_000):
        store.add(RequestOutcome(scheduled=i, start=i, end=i + 300, events=events, event_tokens=tokens,
                                 output_tokens=256, ok=True, finish_reason="length"))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(store.ev_time) == 25_600_000
    assert peak < 400 * 2**20  # about 265 MB of columns, plus array growth slack
    path = store.save(tmp_path / "big.npz")
    assert path.stat().st_size < 50 * 2**20
    back = RecordStore.load(path)
    assert np.array_equal(back.events_of(99_999), np.arange(256))
