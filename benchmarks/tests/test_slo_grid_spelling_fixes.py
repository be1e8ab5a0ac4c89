"""A comparison's goodput note lists each distinct SLO once and says which goodput deltas and best
it gives; grid messages spell refused numbers as JSON does and report every error at once; the
sweep form names an unknown deployment under its field; an SLO in ms is stored in seconds without
binary rounding; a standard deviation of fewer than 2 samples is null."""
from __future__ import annotations

import pytest

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep

SLO = {"ttft_s": 0.02, "e2e_s": 0.05}


def _run(sweep: BenchmarkSweep, ordinal: int, *, goodput: float | None, slo: dict | None,
         status: str = RunStatus.DONE) -> BenchmarkRun:
    summary = {"requests": 20, "successes": 20, "failures": 0, "duration_s": 10.0, "output_throughput_tok_s": 100.0,
               "request_throughput_req_s": 2.0, "ttft_s": {"mean": 0.01, "p50": 0.01, "p90": 0.01, "p99": 0.01}}
    if goodput is not None:
        summary["goodput_req_s"] = goodput
    if slo is not None:
        summary["slo"] = slo
    return BenchmarkRun.objects.create(sweep=sweep, ordinal=ordinal, status=status, concurrency=1, input_len=256,
                                       output_len=256, num_gpus=1, summary=summary)


@pytest.mark.django_db
def test_the_goodput_note_lists_each_slo_once_and_says_which_deltas_it_gives(viewer_api) -> None:
    sweep = BenchmarkSweep.objects.create(name="slo", status=SweepStatus.DONE)
    a = _run(sweep, 0, goodput=2.0, slo=SLO)
    b = _run(sweep, 1, goodput=0.852, slo=SLO)
    failed = _run(sweep, 2, goodput=None, slo=None, status=RunStatus.FAILED)
    plain = _run(sweep, 3, goodput=None, slo=None)
    body = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk},{failed.pk},{plain.pk}").json()
    fields = {f["key"]: f for f in body["fields"]}
    assert fields["goodput_req_s"]["deltas_pct"] == [0.0, -57.4, None, None]
    assert body["best"]["goodput_req_s"] == a.pk
    [note] = [n for n in body["notes"] if n.startswith("goodput")]
    assert note == (
        "goodput is not comparable across these runs: it counts the requests that met each run's own SLO, and their "
        f"SLOs differ (runs #{a.pk} and #{b.pk}: TTFT ≤ 0.02 s, E2E ≤ 0.05 s; run #{plain.pk}: no SLO recorded); "
        f"goodput deltas are given only between runs #{a.pk} and #{b.pk}, which share the baseline run #{a.pk}'s "
        f"SLO; the best goodput is named among runs #{a.pk} and #{b.pk}, the ranked runs with a goodput, which "
        "share one SLO")

    # The baseline without an SLO: no goodput delta at all, and the note says so.
    body = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk},{plain.pk}&baseline={plain.pk}").json()
    fields = {f["key"]: f for f in body["fields"]}
    assert fields["goodput_req_s"]["deltas_pct"] == [None, None, None]
    [note] = [n for n in body["notes"] if n.startswith("goodput")]
    assert note.endswith(f"run #{plain.pk}: no SLO recorded); no goodput delta is given; the best goodput is named "
                         f"among runs #{a.pk} and #{b.pk}, the ranked runs with a goodput, which share one SLO")

    # Three SLOs, two shared: each listed once, and no best goodput across them.
    c = _run(sweep, 4, goodput=1.0, slo={"ttft_s": 0.0000001})
    body = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk},{c.pk}").json()
    assert body["best"]["goodput_req_s"] is None
    assert {f["key"]: f for f in body["fields"]}["goodput_req_s"]["deltas_pct"] == [0.0, -57.4, None]
    assert (f"no best run for goodput: it counts the requests that met each run's own SLO, and the rankable runs' "
            f"SLOs differ or are not known (#{a.pk} and #{b.pk}: TTFT ≤ 0.02 s, E2E ≤ 0.05 s; #{c.pk}: TTFT ≤ 1e-7 s)"
            ) in body["notes"]
    [note] = [n for n in body["notes"] if n.startswith("goodput")]
    assert note.endswith(f"(runs #{a.pk} and #{b.pk}: TTFT ≤ 0.02 s, E2E ≤ 0.05 s; run #{c.pk}: TTFT ≤ 1e-7 s); "
                         f"goodput deltas are given only between runs #{a.pk} and #{b.pk}, which share the baseline "
                         f"run #{a.pk}'s SLO")


# --- grid messages spell numbers as JSON does; every error at once -----------------------------


def _grid_errors(grid: dict) -> dict:
    from benchmarks.sweeps import grid_validate
    from controlplane.errors import InvalidInput

    with pytest.raises(InvalidInput) as err:
        grid_validate(grid)
    return err.value.errors


def test_grid_messages_spell_refused_numbers_as_json_does_and_say_how_to_write_an_integer() -> None:
    base = {"concurrency": [1], "lengths": "8:8"}
    assert _grid_errors({**base, "request_rates": [1e6], "requests": 10}) == {"grid.request_rates.0": [
        "must be at most 10,000 requests/s (what one load-generator process can send on schedule), got 1000000"]}
    assert _grid_errors({**base, "duration_s": 1e5}) == {"grid.duration_s": [
        "must be at least 1 s and at most 86400 s (24 h), got 100000"]}
    # A whole number written with an exponent or a decimal point is refused, as the API's integer
    # fields refuse it, and the message says how to write it.
    assert _grid_errors({**base, "requests": 1e3}) == {"grid.requests": [
        "must be an integer 1..100000, got 1000 written with a decimal point or exponent (write 1000)"]}
    assert _grid_errors({**base, "requests": 2.5}) == {"grid.requests": ["must be an integer 1..100000, got 2.5"]}
    assert _grid_errors({**base, "requests": 1e6}) == {"grid.requests": [
        "must be an integer 1..100000, got 1000000"]}
    assert _grid_errors({"concurrency": [1], "lengths": [[16.0, 16]]}) == {"grid.lengths.0": [
        "must be [input_len, output_len] or 'in:out' with 1..1000000 tokens, got the list [16, 16] written with a "
        "decimal point or exponent (write [16, 16])"]}
    assert _grid_errors({"concurrency": [1.0], "lengths": "8:8", "warmup": 2.0}) == {
        "grid.concurrency.0": ["must be an integer 1..4096, got 1 written with a decimal point or exponent (write 1)"],
        "grid.warmup": ["must be an integer 0..10000, got 2 written with a decimal point or exponent (write 2)"]}
    errors = _grid_errors({**base, "request_rates": [2e-7], "requests": 100, "slo": {"ttft_s": -1.0},
                           "wait_ready_s": 1e5})
    assert errors == {
        "grid.request_rates.0": ["100 requests at 2e-7 req/s take about 500,000,000 s; at most 86400 s (24 h) per "
                                 "point: raise the rate or give duration_s"],
        "grid.slo.ttft_s": ["must be seconds > 0, got -1"], "grid.wait_ready_s": ["must be seconds 0..86400, got 100000"]}
    assert all("e+" not in m and "e-0" not in m for ms in errors.values() for m in ms)


@pytest.mark.django_db
def test_the_context_length_error_comes_with_the_others(operator, operator_api) -> None:
    from deployments.models import Deployment, Node, Recipe

    node, _ = Node.objects.get_or_create(name="local", defaults={"hostname": "localhost", "cpu_count": 2})
    spec = {"served_model_name": "tiny", "roles": {"single": {"cpus": "0", "port": 1, "flags": {"n_ctx": 512}}}}
    recipe = Recipe.objects.create(name="llama", engine="llamacpp", topology="single", node=node, spec=spec)
    deployment = Deployment.objects.create(recipe=recipe, recipe_version=1, spec_snapshot=spec, node=node,
                                           status="ready", entry_url="http://127.0.0.1:1")
    body = {"deployment": deployment.pk, "grid": {"concurrency": [4096], "lengths": "1000000:1",
                                                  "requests_per_concurrency": 100}}
    answer = operator_api.post("/api/sweeps/", body, format="json")
    assert answer.status_code == 400
    errors = answer.json()
    assert set(errors) == {"grid.requests_per_concurrency", "grid.lengths", "grid.lengths.0"}, errors
    assert errors["grid.lengths.0"] == [
        "1000000:1 needs 1,000,001 tokens of context (1000000 in + 1 out), more than the deployment's 512 "
        "(roles.single.flags.n_ctx): the engine would refuse every request; use shorter lengths or deploy with a "
        "larger context"]
    # An invalid pair before it keeps the pair's own index; the form says it too.
    answer = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {
        "concurrency": [1], "lengths": ["x", "600:8"], "requests": 2}}, format="json")
    assert set(answer.json()) == {"grid.lengths.0", "grid.lengths.1"}
    assert answer.json()["grid.lengths.1"][0].startswith("600:8 needs 608 tokens of context")
    from django.test import Client

    web = Client()
    web.force_login(operator)
    page = web.post("/benchmarks/sweeps/new/", {"deployment": deployment.pk, "concurrency": "4096",
                                                "lengths": "1000000:1", "requests": "100000"})
    html = page.content.decode()
    assert page.status_code == 400
    assert "needs 1,000,001 tokens of context" in html and "prompt tokens" in html


# --- the sweep form names an unknown deployment under its field ---------------------------------


@pytest.mark.django_db
def test_the_sweep_form_names_an_unknown_deployment_under_its_field(operator) -> None:
    from django.test import Client

    web = Client()
    web.force_login(operator)
    page = web.post("/benchmarks/sweeps/new/", {"deployment": "999", "concurrency": "1,8", "lengths": "64:64",
                                                "requests": "0", "slo_ttft_ms": "5"})
    html = page.content.decode()
    assert page.status_code == 400
    assert '<input type="text" inputmode="numeric" autocomplete="off" id="id_deployment" name="deployment" ' \
           'value="999">' in html
    assert '<ul class="errorlist"><li>no deployment with id 999</li></ul>' in html
    # The typed values kept, and judged too.
    assert 'name="concurrency" value="1,8"' in html and 'name="slo_ttft_ms" value="5"' in html
    assert "must be an integer 1..100000, got 0" in html
    blank = web.post("/benchmarks/sweeps/new/", {"deployment": "", "concurrency": "1", "lengths": "64:64"})
    assert blank.status_code == 400 and "choose a deployment" in blank.content.decode()
    # A GET of an unknown deployment is still not found, and named; a malformed id is a 400 naming it.
    missing = web.get("/benchmarks/sweeps/new/?deployment=999")
    assert missing.status_code == 404 and "No deployment #999." in missing.content.decode()
    assert "No deployment at" not in missing.content.decode()
    for raw in ("abc", "-3", "1.5"):
        bad = web.get("/benchmarks/sweeps/new/", {"deployment": raw})
        assert bad.status_code == 400, raw
        assert (f"deployment: &#x27;{raw}&#x27; is not a deployment id (a whole number, e.g. 3); choose one below."
                in bad.content.decode()), raw
        assert "Choose the deployment to sweep." in bad.content.decode() or "No deployment can be swept now" in \
            bad.content.decode()


# --- an SLO in ms is stored in seconds without binary rounding ------------------------------------


@pytest.mark.django_db
def test_an_slo_typed_in_ms_is_stored_in_seconds_without_rounding() -> None:
    from benchmarks.sweeps import ms_to_s
    from benchmarks.views.sweep_pages import sweep_grid_from_form

    assert 0.0001 / 1e3 == 1.0000000000000001e-07  # what a binary division stores
    assert ms_to_s(0.0001) == 1e-7 and ms_to_s(250.0) == 0.25 and ms_to_s(0.3) == 0.0003
    grid, errors = sweep_grid_from_form({"concurrency": "1", "lengths": "8:8", "slo_ttft_ms": "0.0001",
                                         "slo_tpot_ms": "0.3", "slo_e2e_ms": "1e-300"})
    assert errors == {}
    assert grid["slo"] == {"ttft_s": 1e-7, "tpot_s": 0.0003, "e2e_s": 1e-303}
    assert repr(grid["slo"]["ttft_s"]) == "1e-07"


# --- a standard deviation of fewer than 2 samples is null ----------------------------------------


@pytest.mark.django_db
def test_every_std_of_fewer_than_two_samples_is_null(viewer_api) -> None:
    import csv
    import io

    import numpy as np

    from benchmarks.loadgen.metrics import distribution

    assert distribution(np.array([0.5]))["std"] is None
    assert distribution(np.array([0.5, 0.7]))["std"] == pytest.approx(0.1)
    sweep = BenchmarkSweep.objects.create(name="one", status=SweepStatus.DONE, grid={"concurrency": [1]})
    one = {"mean": 0.2, "std": 0.0, "p50": 0.2, "p90": 0.2, "p99": 0.2, "count": 1}
    # Stored before the rule: 0.0 for one sample; ITL judged by its own count (gaps), not requests.
    summary = {"requests": 1, "successes": 1, "failures": 0, "duration_s": 1.0, "output_throughput_tok_s": 8.0,
               "ttft_s": one, "tpot_s": one, "e2e_s": one,
               "itl_s": {"mean": 0.05, "std": 0.01, "p50": 0.05, "p90": 0.06, "p99": 0.07, "count": 7}}
    run = BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.DONE, concurrency=1, input_len=8,
                                      output_len=8, num_gpus=1, summary=summary)
    metrics = viewer_api.get(f"/api/runs/{run.pk}/").json()["metrics"]
    assert [metrics[k]["std"] for k in ("ttft_ms", "tpot_ms", "e2e_ms")] == [None, None, None]
    assert metrics["itl_ms"]["std"] == pytest.approx(10.0)
    for url in (f"/api/runs/{run.pk}/export/?format=csv", f"/api/sweeps/{sweep.pk}/export/?format=csv"):
        [row] = list(csv.DictReader(io.StringIO(viewer_api.get(url).content.decode())))
        assert (row["ttft_ms_std"], row["tpot_ms_std"], row["e2e_ms_std"]) == ("", "", ""), url
        assert float(row["itl_per_gap_ms_std"]) == pytest.approx(10.0)
    exported = viewer_api.get(f"/api/runs/{run.pk}/export/?format=json").json()
    assert [exported["metrics"][k]["std"] for k in ("ttft_ms", "tpot_ms", "e2e_ms")] == [None, None, None]


def test_a_duration_of_the_wrong_type_is_told_so_not_that_it_is_out_of_range() -> None:
    base = {"concurrency": [1], "lengths": "8:8"}
    assert _grid_errors({**base, "duration_s": "2"}) == {"grid.duration_s": [
        'must be a number of seconds (at least 1 s and at most 86400 s (24 h)), got the string "2"']}
    assert _grid_errors({**base, "duration_s": True}) == {"grid.duration_s": [
        "must be a number of seconds (at least 1 s and at most 86400 s (24 h)), got the boolean true"]}
    assert _grid_errors({**base, "duration_s": 0.5}) == {"grid.duration_s": [
        "must be at least 1 s and at most 86400 s (24 h), got 0.5"]}
