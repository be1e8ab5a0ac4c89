"""Per-request records of one run, stored column-wise so 100k requests x 256 events stay small.

Layout (all times are ``time.perf_counter_ns()`` values, i.e. CLOCK_MONOTONIC nanoseconds, which
is one clock for every process on a Linux host, so records of worker processes merge directly):

- per request (one entry each, ``n`` requests, in completion order): ``index`` (position of the
  request in the run's dataset), ``scheduled`` (when the arrival process wanted it
  sent; for closed loop the moment it started waiting for a slot), ``start`` (just before the
  request is sent, after the concurrency slot; metrics.md), ``pool_wait`` (ns from ``start`` until a
  connection from a capped HTTP pool was granted, 0 when the request did not queue for one),
  ``first`` (first output event, -1 if none), ``last`` (last output event, -1), ``end`` (response
  fully read or failed), ``output_tokens`` (server usage, or the output-event count when the server
  gave none, see ``tokens_estimated``), ``input_tokens`` (server usage, -1 when unknown),
  ``requested_input``, ``requested_output``, ``http_status``, ``ok`` (1 success, 0 failure),
  ``tokens_estimated`` (1 when ``output_tokens`` was counted from events), ``worker``,
  ``ev_off``/``ev_len`` (slice of the event columns);
- per output-carrying event, flat: ``ev_time`` (int64 ns) and ``ev_tokens`` (uint16: output tokens
  in the event when the server told, 0 when unknown);
- sparse: ``errors`` (request index -> message), ``finish_reasons`` (interned strings, index per
  request in ``finish``; -1 when none was sent), ``texts`` (request index -> output text, only when
  the run kept text).

Memory: 94 bytes per request (7 int64, 9 int32, 2 int8 columns) plus 10 bytes per output event;
100k requests x 256 events is about 265 MB in memory and much less in a compressed ``.npz``.
"""
from __future__ import annotations

import json
from array import array
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["RecordStore", "RequestOutcome"]

_INT_COLUMNS = ("scheduled", "start", "pool_wait", "first", "last", "end", "ev_off")
_I32_COLUMNS = ("index", "output_tokens", "input_tokens", "requested_input", "requested_output", "http_status",
                "ev_len", "finish", "worker")
_I8_COLUMNS = ("ok", "tokens_estimated")
FORMAT_VERSION = 1


@dataclass(slots=True)
class RequestOutcome:
    """One finished request as the client saw it, before it goes into a :class:`RecordStore`.

    Times are ``perf_counter_ns`` values (see the module docstring); ``events`` are the arrival
    times of output-carrying events and ``event_tokens`` their token counts (0 = unknown).
    ``connect_error`` is set (a short description such as ``connection refused to
    127.0.0.1:30000``) only for a failure in which the server sent no byte of a response: refused,
    reset or closed before any response byte. It is not stored in a :class:`RecordStore` (``error``
    is); the run driver counts it to stop a run whose target is gone.
    """

    scheduled: int
    start: int
    end: int
    index: int = -1
    pool_wait: int = 0
    events: array = field(default_factory=lambda: array("q"))
    event_tokens: array = field(default_factory=lambda: array("H"))
    output_tokens: int = -1
    input_tokens: int = -1
    requested_input: int = -1
    requested_output: int = -1
    http_status: int = 0
    ok: bool = False
    tokens_estimated: bool = False
    finish_reason: str | None = None
    error: str | None = None
    text: str | None = None
    connect_error: str | None = None


class RecordStore:
    """Column store of a run's requests; append with :meth:`add`, save/load ``.npz``, merge workers."""

    def __init__(self) -> None:
        for name in _INT_COLUMNS:
            setattr(self, name, array("q"))
        for name in _I32_COLUMNS:
            setattr(self, name, array("i"))
        for name in _I8_COLUMNS:
            setattr(self, name, array("b"))
        self.ev_time = array("q")
        self.ev_tokens = array("H")
        self.errors: dict[int, str] = {}
        self.reasons: list[str] = []
        self._reason_ids: dict[str, int] = {}
        self.texts: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.start)  # type: ignore[attr-defined]

    def add(self, o: RequestOutcome, worker: int = 0) -> int:
        """Append one request; returns its index. Counts are clamped to the column types."""
        i = len(self)
        self.index.append(o.index)  # type: ignore[attr-defined]
        self.scheduled.append(o.scheduled)  # type: ignore[attr-defined]
        self.start.append(o.start)  # type: ignore[attr-defined]
        self.pool_wait.append(o.pool_wait)  # type: ignore[attr-defined]
        self.first.append(o.events[0] if o.events else -1)  # type: ignore[attr-defined]
        self.last.append(o.events[-1] if o.events else -1)  # type: ignore[attr-defined]
        self.end.append(o.end)  # type: ignore[attr-defined]
        self.ev_off.append(len(self.ev_time))  # type: ignore[attr-defined]
        self.ev_len.append(len(o.events))  # type: ignore[attr-defined]
        self.ev_time.extend(o.events)
        self.ev_tokens.extend(o.event_tokens if len(o.event_tokens) == len(o.events) else array("H", bytes(2 * len(o.events))))
        self.output_tokens.append(o.output_tokens)  # type: ignore[attr-defined]
        self.input_tokens.append(o.input_tokens)  # type: ignore[attr-defined]
        self.requested_input.append(o.requested_input)  # type: ignore[attr-defined]
        self.requested_output.append(o.requested_output)  # type: ignore[attr-defined]
        self.http_status.append(o.http_status)  # type: ignore[attr-defined]
        self.ok.append(1 if o.ok else 0)  # type: ignore[attr-defined]
        self.tokens_estimated.append(1 if o.tokens_estimated else 0)  # type: ignore[attr-defined]
        self.worker.append(worker)  # type: ignore[attr-defined]
        self.finish.append(self._reason_id(o.finish_reason))  # type: ignore[attr-defined]
        if o.error is not None:
            self.errors[i] = o.error
        if o.text is not None:
            self.texts[i] = o.text
        return i

    def _reason_id(self, reason: str | None) -> int:
        if reason is None:
            return -1
        rid = self._reason_ids.get(reason)
        if rid is None:
            rid = self._reason_ids[reason] = len(self.reasons)
            self.reasons.append(reason)
        return rid

    def finish_reason(self, i: int) -> str | None:
        """The finish reason request ``i`` reported, or None."""
        rid = self.finish[i]  # type: ignore[attr-defined]
        return None if rid < 0 else self.reasons[rid]

    def events_of(self, i: int) -> np.ndarray:
        """Output-event times (int64 ns) of request ``i``."""
        off, n = self.ev_off[i], self.ev_len[i]  # type: ignore[attr-defined]
        return np.frombuffer(self.ev_time, dtype=np.int64)[off:off + n]

    def event_tokens_of(self, i: int) -> np.ndarray:
        """Per-event token counts (uint16, 0 = unknown) of request ``i``."""
        off, n = self.ev_off[i], self.ev_len[i]  # type: ignore[attr-defined]
        return np.frombuffer(self.ev_tokens, dtype=np.uint16)[off:off + n]

    def column(self, name: str) -> np.ndarray:
        """A per-request or event column as a numpy array (a zero-copy view of the buffer)."""
        col = getattr(self, name)
        return np.frombuffer(col, dtype=np.dtype(col.typecode)) if len(col) else np.array([], dtype=np.dtype(col.typecode))

    # ------------------------------------------------------------------ merge and disk
    @classmethod
    def merge(cls, stores: list[RecordStore]) -> RecordStore:
        """One store with every request of ``stores`` (in order); event offsets are rebased."""
        out = cls()
        for s in stores:
            base_req, base_ev = len(out), len(out.ev_time)
            for name in _INT_COLUMNS + _I32_COLUMNS + _I8_COLUMNS:
                if name == "ev_off":
                    out.ev_off.extend(off + base_ev for off in s.ev_off)  # type: ignore[attr-defined]
                elif name == "finish":
                    out.finish.extend(-1 if r < 0 else out._reason_id(s.reasons[r]) for r in s.finish)  # type: ignore[attr-defined]
                else:
                    getattr(out, name).extend(getattr(s, name))
            out.ev_time.extend(s.ev_time)
            out.ev_tokens.extend(s.ev_tokens)
            out.errors.update({base_req + i: m for i, m in s.errors.items()})
            out.texts.update({base_req + i: t for i, t in s.texts.items()})
        return out

    def head(self, n: int) -> RecordStore:
        """A copy of the first ``n`` requests (all of them when ``n`` is larger), events and sparse
        fields included. Safe to call from another thread while the owner appends (each column
        slice is one atomic copy under the GIL, and only requests below ``n`` are read): how a run
        that stopped answering hands over what it had recorded."""
        out = RecordStore()
        n = max(0, min(n, len(self)))
        for name in _INT_COLUMNS + _I32_COLUMNS + _I8_COLUMNS:
            getattr(out, name).extend(getattr(self, name)[:n])
        events = int(self.ev_off[n - 1] + self.ev_len[n - 1]) if n else 0  # type: ignore[attr-defined]
        out.ev_time.extend(self.ev_time[:events])
        out.ev_tokens.extend(self.ev_tokens[:events])
        out.reasons = list(self.reasons)
        out._reason_ids = dict(self._reason_ids)
        out.errors = {i: m for i, m in self.errors.copy().items() if i < n}
        out.texts = {i: t for i, t in self.texts.copy().items() if i < n}
        return out

    def save(self, path: str | Path) -> Path:
        """Write a compressed ``.npz`` (numpy arrays + one JSON blob for the sparse fields)."""
        path = Path(path)
        arrays = {name: self.column(name) for name in _INT_COLUMNS + _I32_COLUMNS + _I8_COLUMNS}
        arrays["ev_time"] = self.column("ev_time")
        arrays["ev_tokens"] = self.column("ev_tokens")
        meta = {"version": FORMAT_VERSION, "reasons": self.reasons,
                "errors": {str(k): v for k, v in self.errors.items()},
                "texts": {str(k): v for k, v in self.texts.items()}}
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        with open(path, "wb") as fh:
            np.savez_compressed(fh, **arrays)
        return path

    @classmethod
    def load(cls, path: str | Path) -> RecordStore:
        """Read a file written by :meth:`save`; raises ``ValueError`` for another format version."""
        out = cls()
        with np.load(Path(path)) as z:
            meta = json.loads(z["meta"].tobytes().decode())
            if meta.get("version") != FORMAT_VERSION:
                raise ValueError(f"record file version {meta.get('version')!r}, expected {FORMAT_VERSION}")
            for name in _INT_COLUMNS + _I32_COLUMNS + _I8_COLUMNS + ("ev_time", "ev_tokens"):
                col = getattr(out, name)
                col.frombytes(z[name].astype(np.dtype(col.typecode), copy=False).tobytes())
        out.reasons = list(meta["reasons"])
        out._reason_ids = {r: i for i, r in enumerate(out.reasons)}
        out.errors = {int(k): v for k, v in meta["errors"].items()}
        out.texts = {int(k): v for k, v in meta["texts"].items()}
        return out
