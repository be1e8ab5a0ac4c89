"""Sampling uncertainty of a run's latency statistics: 95 % confidence intervals.

A p99 over a few hundred requests is set by a handful of them, and two runs of one point on one
deployment never give the same numbers. These intervals say how far a statistic could move if the
same point were measured again with as many requests, so a reader (and :func:`runs_compare
<benchmarks.services.runs.runs_compare>`) can tell a difference from sampling noise.

* **Percentiles** (p50, p90, p99): the distribution-free interval between two order statistics
  (e.g. Conover, *Practical Nonparametric Statistics*, 3rd ed., §3.2; Hahn & Meeker, *Statistical
  Intervals*, §5.2). The number of samples below the true p-quantile is Binomial(n, p), so the
  interval ``[x_(l), x_(u)]`` (1-based ranks of the sorted samples) covers it with probability
  ``F(u − 1) − F(l − 1)``, F the binomial CDF. ``l`` is the largest rank with ``F(l − 1) ≤ α/2``
  and ``u`` the smallest with ``F(u − 1) ≥ 1 − α/2``, so each tail misses with at most α/2 and the
  coverage is at least 1 − α, for any continuous distribution and any n. Where no rank qualifies
  the bound is not estimable from n samples and is ``None``: a p99's upper bound needs
  ``0.99 ** n ≤ 0.025``, i.e. n ≥ 368 (:func:`min_samples_for_upper_bound`).
* **Mean**: Student's t interval, ``mean ± t(0.975, n − 1) · s / √n`` with s the sample standard
  deviation (n − 1 in the denominator); a normal approximation of the mean, good for the tens of
  requests a point has and more. The interval is symmetric about the sample mean, so with few and
  spread-out samples its lower end can fall below zero (2 requests of 0.1 s and 2.1 s give
  −11.6 s to 13.8 s), which no latency can be. The lower bound is clipped at 0
  (:func:`clip_low`): a mean of non-negative values lies in [0, ∞), and intersecting an interval
  with the range the parameter is known to lie in drops only values it cannot take, so the
  interval misses the true mean no more often than before and the coverage stays ≥ 95 %.

Where an interval is attached to a summary next to its point estimate (:func:`benchmarks.loadgen.metrics.distribution`),
it is widened with :func:`contain_estimate` so that it contains the estimate the summary reports. With few
samples the order-statistic interval can exclude the linearly interpolated percentile: of 2 requests, a
p99's lower bound is the larger sample (rank 2), above the interpolated p99 (which lies 99 % of the way
from the smaller to the larger). An interval that excludes its own estimate reads as a contradiction on
the run page, and widening an interval only raises its coverage, so the "at least 95 %" claim still holds.
With a few hundred requests the interpolated estimate lies between the two order statistics and nothing
changes.

Both assume the samples are exchangeable, as independent requests are. Requests of one closed-loop
run share batches and queues, so their latencies are positively correlated and the true
uncertainty is larger than these intervals: they are a lower bound on the noise, never a claim of
precision. The gaps between output events (ITL) of one request are far from independent, so ITL
gets no interval.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["CONFIDENCE", "ci95", "clip_low", "contain_estimate", "mean_ci", "min_samples_for_interval", "quantile_ci", "quantile_ranks", "min_samples_for_upper_bound", "t_quantile_975"]

#: The confidence level of every interval here.
CONFIDENCE = 0.95

# Student's t 0.975 quantile for 1-30 degrees of freedom (the standard table, e.g. NIST/SEMATECH
# e-Handbook of Statistical Methods, §1.3.6.7.2). Beyond 30 the Cornish-Fisher expansion below is
# within 0.001 of the table.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
# The standard normal 0.975 quantile.
_Z975 = 1.959963984540054


def t_quantile_975(df: int) -> float:
    """Student's t 0.975 quantile for ``df`` ≥ 1 degrees of freedom (table to 30, then the
    Cornish-Fisher expansion ``z + (z³ + z)/(4ν) + (5z⁵ + 16z³ + 3z)/(96ν²)``).

    Raises:
        ValueError: ``df`` < 1.
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def _binomial_cdf(n: int, p: float) -> np.ndarray:
    """``F(k)`` for k = 0..n of Binomial(n, p), 0 < p < 1, computed in log space (no underflow at
    the n of 100,000 requests a point may hold)."""
    k = np.arange(n + 1, dtype=np.float64)
    # log C(n, k) by cumulative sums of log((n - j) / (j + 1)), j < k.
    steps = np.log(np.arange(n, 0, -1, dtype=np.float64)) - np.log(np.arange(1, n + 1, dtype=np.float64))
    log_choose = np.concatenate([[0.0], np.cumsum(steps)])
    log_pmf = log_choose + k * math.log(p) + (n - k) * math.log1p(-p)
    pmf = np.exp(log_pmf - log_pmf.max())
    cdf = np.cumsum(pmf)
    return cdf / cdf[-1]


def quantile_ranks(n: int, q: float, confidence: float = CONFIDENCE) -> tuple[int | None, int | None]:
    """The 1-based ranks ``(l, u)`` of the order statistics bounding the ``q`` quantile
    (0 < q < 1) of ``n`` samples at ``confidence``; ``None`` for a bound n samples cannot give.

    Raises:
        ValueError: ``q`` not in (0, 1), ``n`` < 1, or ``confidence`` not in (0, 1).
    """
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {q}")
    if n < 1:
        raise ValueError(f"need at least one sample, got {n}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    tail = (1.0 - confidence) / 2.0
    cdf = _binomial_cdf(n, q)
    # F(k) for k = 0..n-1 decides the ranks 1..n; F(n) = 1 always.
    low = np.flatnonzero(cdf[:n] <= tail)
    high = np.flatnonzero(cdf[:n] >= 1.0 - tail)
    lower = int(low[-1]) + 1 if low.size else None
    upper = int(high[0]) + 1 if high.size else None
    return lower, upper


def min_samples_for_upper_bound(q: float, confidence: float = CONFIDENCE) -> int:
    """The fewest samples whose largest one bounds the ``q`` quantile from above at
    ``confidence``: ``ceil(ln(α/2) / ln(q))`` (368 for a p99 at 95 %)."""
    return math.ceil(math.log((1.0 - confidence) / 2.0) / math.log(q))


def quantile_ci(sorted_values: np.ndarray, q: float,
                confidence: float = CONFIDENCE) -> tuple[float | None, float | None]:
    """The distribution-free interval ``(low, high)`` for the ``q`` quantile (0 < q < 1) of the
    population ``sorted_values`` (ascending, finite) were drawn from, in their unit; a bound the
    sample is too small to give is ``None``. Raises ``ValueError`` for an empty sample."""
    lower, upper = quantile_ranks(int(sorted_values.size), q, confidence)
    return (None if lower is None else float(sorted_values[lower - 1]),
            None if upper is None else float(sorted_values[upper - 1]))


def contain_estimate(bounds: list[float | None] | None, estimate: float | None) -> list[float | None] | None:
    """``bounds`` (``[low, high]``, either ``None`` where unbounded) widened to contain ``estimate``,
    in the same unit: a low above the estimate becomes the estimate, as does a high below it. An
    unbounded side, a missing interval (``None``) and a missing estimate are left as they are.
    Widening only raises coverage, so an interval at ≥ 95 % stays at ≥ 95 % (module docstring)."""
    if bounds is None or estimate is None:
        return bounds
    low, high = bounds
    return [None if low is None else min(low, estimate), None if high is None else max(high, estimate)]


def clip_low(bounds: list[float | None] | None, floor: float = 0.0) -> list[float | None] | None:
    """``bounds`` (``[low, high]``, either ``None`` where unbounded) with a low under ``floor``
    raised to it, in the same unit (0 by default: a latency is never negative). A missing interval,
    an unbounded side and a high are left as they are. The parameter cannot lie below ``floor``, so
    the values cut off were never the true one and the coverage is unchanged (module docstring)."""
    if bounds is None:
        return bounds
    low, high = bounds
    return [None if low is None else max(low, floor), high]


def mean_ci(values: np.ndarray, *, floor: float | None = 0.0) -> tuple[float, float] | None:
    """Student's t 95 % interval ``(low, high)`` for the mean of ``values`` (finite), in their
    unit; ``None`` for fewer than two values (no spread to judge). The low is at least ``floor``
    (0 by default, for latencies, which are never negative; None to leave it unclipped):
    intersecting the interval with the range the mean is known to lie in keeps its coverage at
    ≥ 95 % (module docstring)."""
    n = int(values.size)
    if n < 2:
        return None
    mean = float(values.mean())
    half = t_quantile_975(n - 1) * float(values.std(ddof=1)) / math.sqrt(n)
    low = mean - half if floor is None else max(mean - half, floor)
    return low, mean + half


def min_samples_for_interval(stat: str, confidence: float = CONFIDENCE) -> int:
    """The fewest samples that bound ``stat`` (``"mean"`` or ``"p<q>"``, e.g. ``"p50"``) on both
    sides at ``confidence``: 2 for the mean (a spread needs two), and for a quantile the larger of
    what its lower bound needs (``(1 - q) ** n ≤ α/2``) and its upper bound needs (``q ** n ≤
    α/2``): 6 for p50, 36 for p90, 368 for p99.

    Raises:
        ValueError: ``stat`` is neither ``mean`` nor ``p`` and a whole percent in 1..99.
    """
    if stat == "mean":
        return 2
    if not (stat.startswith("p") and stat[1:].isdigit() and 0 < int(stat[1:]) < 100):
        raise ValueError(f"stat must be 'mean' or 'p1'..'p99', got {stat!r}")
    q = int(stat[1:]) / 100.0
    return max(min_samples_for_upper_bound(q, confidence), min_samples_for_upper_bound(1.0 - q, confidence))


def ci95(values: np.ndarray, percentiles: tuple[int, ...] = (50, 90, 99)) -> dict[str, list[float | None] | None]:
    """``{"mean": [low, high], "p50": [low, high], ...}``: the 95 % interval of each statistic of
    ``values`` (finite samples, one per request), in their unit, ``None`` in a bound the sample
    cannot give (both bounds of the mean of one sample; :func:`min_samples_for_interval` says how
    many samples a statistic needs). An empty sample has no entries: each is ``None``."""
    if values.size == 0:
        return {"mean": None, **{f"p{p}": None for p in percentiles}}
    ordered = np.sort(values)
    mean = mean_ci(values)
    return {"mean": [None, None] if mean is None else [mean[0], mean[1]],
            **{f"p{p}": list(quantile_ci(ordered, p / 100.0)) for p in percentiles}}
