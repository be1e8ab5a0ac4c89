"""``GET /api/runs/compare/`` picks runs by ``ids=`` and by ``sweeps=`` (every run of a sweep), and
refuses a query that names one run or sweep twice, naming the repeated id, as a repeated grid
value is refused; when ``sweeps=`` alone brings fewer than two runs the refusal is under
``sweeps``, the key that was given, and says how many runs the sweeps have."""
from __future__ import annotations

import pytest

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep

pytestmark = pytest.mark.django_db

SUMMARY = {"requests": 4, "successes": 4, "failures": 0, "duration_s": 1.0, "output_throughput_tok_s": 463.7,
           "ttft_s": {"mean": 0.02, "p50": 0.02, "p90": 0.03, "p99": 0.031}}


def _sweep(runs: int) -> BenchmarkSweep:
    sweep = BenchmarkSweep.objects.create(name=f"{runs} runs", status=SweepStatus.DONE)
    for i in range(runs):
        BenchmarkRun.objects.create(sweep=sweep, ordinal=i, status=RunStatus.DONE, concurrency=1 + i, input_len=64,
                                    output_len=16, summary=SUMMARY)
    return sweep


def test_it_refuses_a_run_id_given_twice_naming_it(viewer_api) -> None:
    a, b = _sweep(2).runs.order_by("ordinal")
    response = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{a.pk}")
    assert response.status_code == 400
    assert response.json() == {"ids": [f"repeated run id: {a.pk} (2 times); give each once"]}
    # with other runs too: still refused, not compared once
    response = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk},{a.pk}")
    assert response.json() == {"ids": [f"repeated run id: {a.pk} (2 times); give each once"]}


def test_it_refuses_a_sweep_id_given_twice_with_a_repeated_run_id(viewer_api) -> None:
    sweep = _sweep(2)
    a = sweep.runs.first()
    response = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{a.pk}&sweeps={sweep.pk},{sweep.pk}")
    assert response.status_code == 400
    assert response.json() == {"ids": [f"repeated run id: {a.pk} (2 times); give each once"],
                               "sweeps": [f"repeated sweep id: {sweep.pk} (2 times); give each once"]}


def test_it_compares_the_runs_of_a_sweep_given_alone(viewer_api) -> None:
    sweep = _sweep(2)
    response = viewer_api.get(f"/api/runs/compare/?sweeps={sweep.pk}")
    assert response.status_code == 200
    assert [r["id"] for r in response.json()["runs"]] == list(sweep.runs.order_by("ordinal").values_list("pk",
                                                                                                            flat=True))
    # a run of the sweep named in ids= too is compared once: the two keys pick runs together
    first = sweep.runs.order_by("ordinal").first()
    response = viewer_api.get(f"/api/runs/compare/?ids={first.pk}&sweeps={sweep.pk}")
    assert response.status_code == 200 and len(response.json()["runs"]) == 2


def test_it_refuses_sweeps_alone_that_bring_fewer_than_two_runs_under_sweeps(viewer_api) -> None:
    one, empty = _sweep(1), _sweep(0)
    response = viewer_api.get(f"/api/runs/compare/?sweeps={one.pk}")
    assert response.status_code == 400
    assert response.json() == {"sweeps": [f"sweep {one.pk} has 1 run; a comparison needs at least two: add runs "
                                          "with ids= or another sweep"]}
    response = viewer_api.get(f"/api/runs/compare/?sweeps={empty.pk}")
    assert response.json() == {"sweeps": [f"sweep {empty.pk} has no runs; a comparison needs at least two: add "
                                          "runs with ids= or another sweep"]}
    response = viewer_api.get(f"/api/runs/compare/?sweeps={one.pk},{empty.pk}")
    assert response.json() == {"sweeps": [f"sweeps {one.pk}, {empty.pk} have 1 run between them; a comparison "
                                          "needs at least two: add runs with ids= or another sweep"]}
    # one run by id is still refused under ids, the key that was given
    run = one.runs.get()
    assert viewer_api.get(f"/api/runs/compare/?ids={run.pk}").json() == {"ids": ["give at least two runs to compare"]}


def test_it_names_a_misspelt_sweeps_key_as_unknown(viewer_api) -> None:
    sweep = _sweep(2)
    response = viewer_api.get(f"/api/runs/compare/?sweep={sweep.pk}")
    assert response.status_code == 400
    assert response.json() == {"sweep": ["unknown field 'sweep'; allowed: ids, sweeps, baseline, format"]}
