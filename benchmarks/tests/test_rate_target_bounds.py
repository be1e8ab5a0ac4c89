"""The open-loop rate check's bounds: 3 standard deviations of ln(sent / target), so asymmetric in
rate (−50 % / +99 % for 20 Poisson requests), as docs/benchmarks.md says."""
from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.loadgen.metrics import RATE_TARGET_SIGMAS, _rate_target_check


def test_the_bounds_for_twenty_requests_are_minus_50_and_plus_99_percent() -> None:
    check = _rate_target_check(sent_rate=10.0, target=10.0, n=20)
    assert check["bound_low"] == pytest.approx(-0.4975, abs=1e-4)
    assert check["bound_high"] == pytest.approx(0.9902, abs=1e-4)
    assert check["bound"] == check["bound_high"] and check["sigmas"] == 0.0 and check["off_target"] is False
    # 60 % above is inside, 55 % below is outside: the rule is symmetric in log(rate) only
    assert _rate_target_check(sent_rate=16.0, target=10.0, n=20)["off_target"] is False
    below = _rate_target_check(sent_rate=4.5, target=10.0, n=20)
    assert below["off_target"] is True and below["sigmas"] == pytest.approx(math.log(10 / 4.5) * math.sqrt(19))
    # a burstier schedule (b = 0.5) is noisier: wider bounds
    bursty = _rate_target_check(sent_rate=10.0, target=10.0, n=20, burstiness=0.5)
    assert bursty["bound_low"] == pytest.approx(math.exp(-3 / math.sqrt(9.5)) - 1)
    assert bursty["bound_high"] == pytest.approx(math.exp(3 / math.sqrt(9.5)) - 1)


def test_a_correct_poisson_schedule_crosses_the_bounds_rarely_on_either_side() -> None:
    # 20 requests: the realised rate is 19 / T with T the sum of 19 exponential gaps of mean 1/rate.
    rng = np.random.default_rng(7)
    rates = 19.0 / rng.gamma(19.0, 1.0, size=400_000)
    check = _rate_target_check(sent_rate=1.0, target=1.0, n=20)
    above = float(np.mean(rates - 1 > check["bound_high"]))
    below = float(np.mean(rates - 1 < check["bound_low"]))
    assert 0.003 < above < 0.006 and 0.0001 < below < 0.0006
    # bounds symmetric in rate (±3/√19) would be crossed about 2 % of the time above, never below
    sym = RATE_TARGET_SIGMAS / math.sqrt(19)
    assert float(np.mean(rates - 1 > sym)) > 0.015 and float(np.mean(rates - 1 < -sym)) == 0.0
