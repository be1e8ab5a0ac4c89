"""A sweep that mixes load kinds (closed-loop concurrency points and open-loop request-rate points)
runs on one server, so its analysis has one decode-step fit through the points of both kinds, each
point labelled with its kind, and one fitted ceiling, said once; each kind keeps only what is its
own (its bottleneck, whether it reached the ceiling, its queueing)."""
from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.choices import SweepStatus
from benchmarks.services import sweep_analysis, sweep_create, sweep_execute
from benchmarks.tests.sweep_support import sim_deployment_create


@pytest.fixture
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


@pytest.mark.timeout(240)
@pytest.mark.django_db(transaction=True)
def test_a_sweep_of_both_load_kinds_has_one_fit_and_one_fitted_ceiling(sim_url: str, operator, _var_dir,
                                                                       client) -> None:
    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [1, 4, 8], "request_rates": [10, 40], "lengths": [[64, 32]],
                               "requests": 16, "warmup": 2})
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
    sweep.refresh_from_db()

    report = sweep_analysis(sweep=sweep)["lengths"]["64/32"]
    fit = report["fit"]
    # One fit, through every point that has decode events, each labelled with its load kind.
    # (A point whose events reached the client coalesced on a busy host takes its running batch
    # from Little's law instead, which makes the fit's source "mixed", or "littles_law" when every
    # point came coalesced; it is still one fit through both kinds' points.)
    assert fit["possible"] is True and fit["batch_source"] in ("decode_events", "mixed", "littles_law")
    assert fit["labels"] == ["c=1", "c=4", "c=8", "10.0 req/s", "40.0 req/s"]
    assert fit["load_kinds"] == ["closed", "closed", "closed", "open", "open"]
    if fit["batch_source"] == "decode_events":
        # The demo-fast profile's decode step: 4 ms + 1.0 ms per running sequence.
        assert fit["fixed_ms"] == pytest.approx(4.0, abs=1.0)
        assert fit["per_seq_ms"] == pytest.approx(1.0, rel=0.15)
    # Both kinds quote the one fitted ceiling of the server, each against its own best point.
    ceilings = {g["kind"]: g["ceiling"] for g in report["groups"]}
    assert set(ceilings) == {"closed", "open"}
    assert {c["source"] for c in ceilings.values()} == {"fit_capped"}
    assert ceilings["closed"]["tok_s"] == ceilings["open"]["tok_s"]
    assert (ceilings["closed"]["observed_max_label"], ceilings["open"]["observed_max_label"]) == ("c=8", "40.0 req/s")

    findings = report["findings"]
    said_once = [f for f in findings if "The fit puts the ceiling" in f or "the fit puts the ceiling" in f]
    assert len(said_once) == 1, findings
    assert said_once[0].startswith("The fit puts the ceiling at ")
    assert "one ceiling for the server whichever load drives it" in said_once[0]
    assert "at c=8" in said_once[0] and "in the closed loop" in said_once[0]
    assert "at 40.0 req/s" in said_once[0] and "in the open loop" in said_once[0]
    assert sum("of the ceiling needs a running batch" in f for f in findings) == 1, findings
    assert sum(f.startswith("Decode step time") for f in findings) == 1
    [fit_sentence] = [f for f in findings if f.startswith("Decode step time")]
    assert "over 5 points of both load kinds, one server" in fit_sentence
    closed, open_ = fit_sentence.split(": closed loop ", 1)[1].split("; open loop ")
    assert [part.rsplit(" at ", 1)[1] for part in closed.split(", ")] == ["c=1", "c=4", "c=8"]
    assert [part.rsplit(" at ", 1)[1] for part in open_.rstrip(".").split(", ")] == ["10.0 req/s", "40.0 req/s"]
    # The fit's numbers are quoted in the fit sentence alone, not again per kind.
    assert sum("per running sequence" in f for f in findings) == 1, findings

    # The page shows the same findings, the fitted ceiling once.
    client.force_login(operator)
    page = client.get(f"/benchmarks/sweeps/{sweep.pk}/").content.decode()
    assert page.count("he fit puts the ceiling at") == 1
