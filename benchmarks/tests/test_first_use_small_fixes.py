"""Small defects a new user found in the benchmarks app: each fix checked on real rows, pages and
a real sim engine."""
from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkSweep
from benchmarks.services import sweep_create, sweep_execute, sweep_follow_line
from benchmarks.services import sweeps as sweeps_module
from benchmarks.tests.sweep_support import sim_deployment_create


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.django_db(transaction=True)
def test_between_points_the_progress_line_numbers_and_names_the_same_point(sim_url: str, operator, settings,
                                                                           tmp_path: Path, monkeypatch) -> None:
    """Once a point is done the next one is named with it: after 2 of 3 points it is c=4, not the c=2 just done."""
    settings.VAR_DIR = tmp_path
    lines = []
    broadcast = sweeps_module._broadcast_point

    def broadcast_and_read(sweep_id, run):  # the real broadcast, then the line a waiting terminal prints now
        broadcast(sweep_id, run)
        lines.append(sweep_follow_line(sweep=BenchmarkSweep.objects.get(pk=sweep_id), elapsed_s=0))

    monkeypatch.setattr(sweeps_module, "_broadcast_point", broadcast_and_read)
    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [1, 2, 4], "lengths": ["32:16"], "requests_per_concurrency": 1})
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
    assert [line.split(": ", 1)[1] for line in lines] == [
        "running, starting c=2 32/16, points 1/3 done, requests 1/7 done",
        "running, starting c=4 32/16, points 2/3 done, requests 3/7 done",
        "running, analysing the results, points 3/3 done, requests 7/7 done"]
