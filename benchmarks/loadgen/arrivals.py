"""Arrival processes: when each request of an open-loop run is due.

Open loop (``rate`` requests/s): Poisson arrivals (exponential gaps, mean 1/rate) or, with
``burstiness`` b != 1, gamma-distributed gaps with shape b and scale 1/(rate·b) — the same mean,
variance 1/(rate²·b); b < 1 is burstier. This is the parametrisation vLLM's ``bench serve`` and
SGLang's ``bench_serving`` use, so runs compare. Closed loop has no schedule: ``concurrency``
slots each send the next request as soon as the previous one ends.
"""
from __future__ import annotations

import random

__all__ = ["arrival_offsets", "scheduled_rate"]


def arrival_offsets(*, n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Seconds after the run's start at which requests 0..n-1 are due (first at 0.0).

    ``rate`` = inf sends everything at once. Raises ``ValueError`` for rate <= 0 or burstiness <= 0.
    """
    if rate <= 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    if burstiness <= 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    if rate == float("inf"):
        return [0.0] * n
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(n):
        if i:
            t += rng.expovariate(rate) if burstiness == 1.0 else rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
        out.append(t)
    return out


def scheduled_rate(offsets: list[float]) -> float | None:
    """The rate the schedule itself realises: (n−1) / (last − first), None for n < 2 or zero span."""
    if len(offsets) < 2 or offsets[-1] <= offsets[0]:
        return None
    return (len(offsets) - 1) / (offsets[-1] - offsets[0])
