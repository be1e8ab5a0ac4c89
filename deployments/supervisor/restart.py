"""Restart policy as pure logic: what to do after an engine process failed.

The rule combines two well-known ones: capped exponential back-off between attempts (the
shape of Kubernetes' CrashLoopBackOff, which doubles from 10 s up to 5 min) and giving up after
a burst of failures inside a sliding window (systemd's ``StartLimitBurst`` within
``StartLimitIntervalSec``). Defaults are smaller than both because an engine that fails five
times in ten minutes on the same GPUs will not heal by waiting longer.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

NEVER = "never"
ON_FAILURE = "on-failure"
POLICIES = (NEVER, ON_FAILURE)  # the values of deployments.choices.RestartPolicy


@dataclass(frozen=True)
class RestartPolicy:
    """``policy``: ``never`` or ``on-failure``. Give up once ``max_failures`` failures happened
    within the last ``window_s`` seconds; before that, wait ``backoff_initial_s`` doubled for
    each earlier failure in the window, at most ``backoff_max_s`` (all in seconds)."""

    policy: str = ON_FAILURE
    max_failures: int = 5
    window_s: float = 600.0
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"restart policy must be one of {POLICIES}, not {self.policy!r}")
        if self.max_failures < 1:
            raise ValueError("max_failures must be at least 1")
        if self.window_s <= 0 or self.backoff_initial_s < 0 or self.backoff_max_s < self.backoff_initial_s:
            raise ValueError("window_s must be > 0 and 0 <= backoff_initial_s <= backoff_max_s")

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the five fields."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RestartPolicy":
        """Build from a dict such as a recipe's ``restart`` block; missing keys take defaults,
        unknown keys are ignored; raises ``ValueError`` on bad values."""
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)

    def next_action(self, failure_times: Sequence[float], now: float) -> tuple[str, float | str]:
        """Decide after a failure. ``failure_times``: times (seconds, any monotonic or epoch
        clock shared with ``now``) of every failure so far, the one just seen included.

        Returns ``("restart", delay_s)`` or ``("give_up", reason)``; the reason names the count
        and the window so the row can say why it stopped trying.
        """
        if self.policy == NEVER:
            return ("give_up", "restart policy is 'never'")
        recent = sorted(t for t in failure_times if 0 <= now - t <= self.window_s)
        if len(recent) >= self.max_failures:
            return (
                "give_up",
                f"{len(recent)} failures within {self.window_s:g}s (limit {self.max_failures})",
            )
        exponent = max(0, len(recent) - 1)
        # Cap the exponent before raising 2 to it, so a huge count cannot overflow a float.
        delay = self.backoff_initial_s * (2 ** min(exponent, 62))
        return ("restart", float(min(delay, self.backoff_max_s)))
