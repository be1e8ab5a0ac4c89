"""Numbers and latencies in words, shared by the bottleneck reasons and the findings: ``94 ms``,
``2.0 s``, ``24.5-25.0 tok/s``, ``mean TPOT``, what falling throughput points at."""
from __future__ import annotations

import math
from collections.abc import Iterable

from benchmarks.analysis.model import FALL_FRACTION, PLATEAU_FRACTION, CeilingReport, DecodeFit, SweepPoint, _fixed, _num


def _failures_of(p: SweepPoint) -> str:
    """``15 of 16 requests failed``."""
    total = (p.completed or 0) + (p.failed or 0)
    return f"{p.failed} of {total} request{'s' if total != 1 else ''} failed"


def _falls_cause(failed_requests: int) -> str:
    """What falling throughput points at: ``overload (no request failed)`` when every request
    succeeded, ``failures (3 failed requests) or overload`` when some failed."""
    if failed_requests <= 0:
        return "overload (no request failed)"
    return f"failures ({failed_requests} failed request{'s' if failed_requests != 1 else ''}) or overload"


def _load_ratio(first: SweepPoint, last: SweepPoint) -> float:
    return last.load / first.load if first.load > 0 and math.isfinite(last.load) else math.nan


def _throughput_change(first: SweepPoint, last: SweepPoint) -> str:
    """``grows x8.0 for x8.0 load`` when it grew, ``falls from 40.0 to 12.0 tok/s (x0.30) for x16.0
    load`` when it fell: a factor below one is never called growth."""
    a, b = first.output_throughput_tok_s, last.output_throughput_tok_s
    load = _load_ratio(first, last)
    if b >= a:
        return f"grows x{_fixed(b / a, 1)} for x{_fixed(load, 1)} load"
    return f"falls from {_num(a)} to {_num(b)} tok/s (x{_fixed(b / a, 2)}) for x{_fixed(load, 1)} load"


def _falls_numbers(points: list[SweepPoint]) -> str:
    """``from 42.0 tok/s at c=2, the best point, to 12.0 tok/s at c=16, x0.29 for x8.0 load``."""
    best = max(points, key=lambda p: p.output_throughput_tok_s)
    last = points[-1]
    ratio = last.output_throughput_tok_s / best.output_throughput_tok_s
    return (f"from {_num(best.output_throughput_tok_s)} tok/s at {best.label}, the best point, to "
            f"{_num(last.output_throughput_tok_s)} tok/s at {last.label}, x{_fixed(ratio, 2)} for "
            f"x{_fixed(_load_ratio(best, last), 1)} load")


def _dip(points: list[SweepPoint]) -> tuple[SweepPoint, SweepPoint] | None:
    """The deepest fall below ``FALL_FRACTION`` of the best lighter-load point, ``(that point, the
    fallen one)``; None when no point fell that far."""
    deepest: tuple[float, SweepPoint, SweepPoint] | None = None
    best: SweepPoint | None = None
    for p in points:
        if best is not None and best.output_throughput_tok_s > 0:
            ratio = p.output_throughput_tok_s / best.output_throughput_tok_s
            if ratio < FALL_FRACTION and (deepest is None or ratio < deepest[0]):
                deepest = (ratio, best, p)
        if best is None or p.output_throughput_tok_s > best.output_throughput_tok_s:
            best = p
    return (deepest[1], deepest[2]) if deepest is not None else None


def _last_falls(points: list[SweepPoint]) -> bool:
    """The heaviest point is below ``PLATEAU_FRACTION`` of the best one: throughput ends fallen."""
    best = max(p.output_throughput_tok_s for p in points)
    return points[-1].output_throughput_tok_s < PLATEAU_FRACTION * best


def _dip_numbers(points: list[SweepPoint]) -> str:
    """``from 620 tok/s at c=1 to 444 tok/s at c=8, x0.72 for x8.0 load (below x0.81), before 636
    tok/s at c=16``: a fall that throughput came back from."""
    dip = _dip(points)
    assert dip is not None
    a, b = dip
    last = points[-1]
    back = (f", before {_num(last.output_throughput_tok_s)} tok/s at {last.label}" if last is not b else "")
    return (f"from {_num(a.output_throughput_tok_s)} tok/s at {a.label} to {_num(b.output_throughput_tok_s)} "
            f"tok/s at {b.label}, x{_fixed(b.output_throughput_tok_s / a.output_throughput_tok_s, 2)} for "
            f"x{_fixed(_load_ratio(a, b), 1)} load (a fall is below x{_fixed(FALL_FRACTION, 2)}){back}")


def _no_growth_numbers(fit: DecodeFit) -> str:
    """The measured step time (named, :func:`_step_name`) at the smallest and largest running batch
    of the fit."""
    pairs = sorted(zip(fit.running_batch, fit.steps_ms, fit.labels, strict=True))
    (b0, t0, l0), (b1, t1, l1) = pairs[0], pairs[-1]
    name = "the step time" if fit.batch_source in ("decode_events", "mixed") else _step_name(fit)
    return (f"{name} is {_ms(t0)} at {_fixed(b0, 1)} running sequences ({l0}) and {_ms(t1)} "
            f"at {_fixed(b1, 1)} ({l1})")


def _step_name(fit: DecodeFit) -> str:
    """What the fit's step times are: ``mean gap between output events, decode pauses left out``
    for a ``decode_events`` fit, the TPOT with its statistic (``mean TPOT``) for a TPOT fit, and
    for a ``mixed`` one each with its points (``mean gap ..., at c=4, c=8; mean TPOT at c=1``)."""
    if fit.batch_source == "decode_events":
        return "mean gap between output events, decode pauses left out"
    if fit.batch_source == "mixed":
        on_tpot = [(lb, t) for lb, t, s in zip(fit.labels, fit.tpot_stats, fit.batch_sources, strict=True)
                   if s != "decode_events"]
        events = [lb for lb, s in zip(fit.labels, fit.batch_sources, strict=True) if s == "decode_events"]
        return (f"mean gap between output events, decode pauses left out, at {', '.join(events)}; "
                f"{_metric('TPOT', [t for _, t in on_tpot])} at {', '.join(lb for lb, _ in on_tpot)}")
    return _metric("TPOT", fit.tpot_stats)


def _per_seq(x: float) -> str:
    """A per-sequence cost in ms: one decimal from 1 ms up (``35.2 ms``), two significant figures
    below (``0.35 ms``), so a small cost never prints as ``0.0 ms``."""
    return f"{_fixed(x, 1)} ms" if abs(x) >= 1 else f"{x:.2g} ms"


def _metric(name: str, stats: Iterable[str | None]) -> str:
    """A latency named with the statistic the numbers are: ``mean TPOT``, ``p50 TPOT`` (runs that
    recorded only the median, e.g. some imported files), or ``TPOT (mean, or p50 where a run
    recorded no mean)`` when the points differ."""
    used = {s for s in stats if s}
    if used == {"p50"}:
        return f"p50 {name}"
    if used == {"mean", "p50"}:
        return f"{name} (mean, or p50 where a run recorded no mean)"
    return f"mean {name}"


def _vals(r: CeilingReport, attr: str) -> list[float]:
    return [v for v in (getattr(a, attr) for a in r.points) if v is not None]


def _tok(lo: float, hi: float) -> str:
    return f"{_num(lo)} tok/s" if _num(lo) == _num(hi) else f"{_num(lo)}-{_num(hi)} tok/s"


def _ms(x: float | None) -> str:
    """A duration given in ms: ``94 ms`` from 10 ms to a second, ``4.1 ms`` from 1 ms, two
    significant figures below (``0.027 ms``: a small residual never prints as ``0 ms``), ``2.0 s``
    from a second."""
    if x is None:
        return "unknown"
    if x == 0:
        return "0 ms"
    if abs(x) < 1:
        return f"{x:.2g} ms"
    if abs(x) < 10:
        return f"{x:.1f} ms"
    if abs(x) < 1000:
        return f"{x:.0f} ms"
    return f"{_fixed(x / 1000, 1)} s"


def _span_ms(a: float | None, b: float | None, *, moving: str) -> str:
    """``stays at 20 ms`` when both round the same, else ``<moving> from 15 ms to 30 ms`` (or
    ``stays between`` for an unordered min/max pair)."""
    if _ms(a) == _ms(b):
        return f"stays at {_ms(a)}"
    if moving == "stays":
        return f"stays between {_ms(a)} and {_ms(b)}"
    return f"{moving} from {_ms(a)} to {_ms(b)}"


def _r2(fit: DecodeFit) -> str:
    return f"R² {fit.r_squared:.3f}" if fit.r_squared is not None else "R² undefined: TPOT is the same everywhere"


