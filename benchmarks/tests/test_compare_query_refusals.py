"""``GET /api/runs/compare/`` picks runs by ``ids=`` and by ``sweeps=`` (every run of a sweep), and
refuses a query that names one run or sweep twice, naming the repeated id, as a repeated grid
value is refused; when ``sweeps=`` alone brings fewer than two runs the refusal is under
``sweeps``, the key that was given, and says how many runs the sweeps have, and a run given by id
that the sweeps given already hold is named as such. The comparison page refuses the same queries
in the same words when the form sent them, showing the form again with the values typed, and
shows the reason as a hint to a link that named too few runs."""
from __future__ import annotations

import pytest

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.tests.page_support import logged_in_client

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


def test_it_compares_the_runs_of_a_sweep_given_alone(viewer, viewer_api) -> None:
    sweep = _sweep(2)
    response = viewer_api.get(f"/api/runs/compare/?sweeps={sweep.pk}")
    assert response.status_code == 200
    assert [r["id"] for r in response.json()["runs"]] == list(sweep.runs.order_by("ordinal").values_list("pk",
                                                                                                            flat=True))
    # a run of the sweep named in ids= too is compared once: the two keys pick runs together
    first = sweep.runs.order_by("ordinal").first()
    response = viewer_api.get(f"/api/runs/compare/?ids={first.pk}&sweeps={sweep.pk}")
    assert response.status_code == 200 and len(response.json()["runs"]) == 2
    # ... and the answer says so rather than dropping the repeat silently; a sweep alone has no such note
    note = f"run {first.pk} is also in sweep {sweep.pk}; compared once"
    assert response.json()["notes"][0] == note
    assert not any("compared once" in n for n in viewer_api.get(f"/api/runs/compare/?sweeps={sweep.pk}").json()["notes"])
    status, html = _page(viewer, f"runs={first.pk}&sweeps={sweep.pk}")
    assert status == 200 and f"<p>{note[0].upper() + note[1:]}.</p>" in html


def test_the_page_refuses_an_unknown_format_as_a_400_naming_those_it_serves(viewer, viewer_api) -> None:
    a, b = _sweep(2).runs.order_by("ordinal")
    api = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk}&format=xml")
    assert (api.status_code, api.json()) == (400, {"format": ["must be one of json, csv, api; got 'xml'"]})
    status, html = _page(viewer, f"ids={a.pk},{b.pk}&format=xml")
    assert status == 400
    assert ("<p>Format must be csv, or absent for this page (json: /api/runs/compare/); got &#x27;xml&#x27;.</p>"
            in html)
    assert f'name="runs" value="{a.pk},{b.pk}"' in html


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
    assert viewer_api.get(f"/api/runs/compare/?ids={run.pk}").json() == {
        "ids": [f"only run {run.pk} was given; give at least two runs to compare"]}


def test_it_names_a_misspelt_sweeps_key_as_unknown(viewer_api) -> None:
    sweep = _sweep(2)
    response = viewer_api.get(f"/api/runs/compare/?sweep={sweep.pk}")
    assert response.status_code == 400
    assert response.json() == {"sweep": ["unknown field 'sweep'; allowed: ids, sweeps, baseline, format"]}


def test_it_names_the_comparison_pages_run_key_as_unknown_however_often_it_is_given(viewer, viewer_api) -> None:
    a, b = _sweep(2).runs.order_by("ordinal")
    # the page's URL (its checkboxes send run=, links runs=) compares the two runs
    status, html = _page(viewer, f"run={a.pk}&run={b.pk}")
    assert status == 200 and f"#{a.pk}" in html and f"#{b.pk}" in html
    hint = "unknown field '{key}'; allowed: ids, sweeps, baseline, format; the comparison page's {key}= is ids= here"
    for query in (f"run={a.pk}", f"run={a.pk}&run={b.pk}", f"run={a.pk}&run={b.pk}&ids={a.pk}&ids={b.pk}"):
        response = viewer_api.get(f"/api/runs/compare/?{query}")
        assert response.status_code == 400, query
        assert response.json()["run"] == [hint.format(key="run")], query
    # with ids given twice beside it: both in one 400
    assert viewer_api.get(f"/api/runs/compare/?run={a.pk}&run={b.pk}&ids={a.pk}&ids={b.pk}").json()["ids"] == [
        f"is given 2 times ({a.pk}, {b.pk}): give it once"]
    assert viewer_api.get(f"/api/runs/compare/?runs={a.pk},{b.pk}").json() == {"runs": [hint.format(key="runs")]}
    # what the hint says works
    compared = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk}")
    assert compared.status_code == 200 and [r["id"] for r in compared.json()["runs"]] == [a.pk, b.pk]


def _page(viewer, query: str):
    """The comparison page for ``query``: (status code, HTML)."""
    response = logged_in_client(viewer).get(f"/benchmarks/compare/?{query}")
    return response.status_code, response.content.decode()


def test_the_page_refuses_a_run_id_given_twice_as_the_api_does(viewer, viewer_api) -> None:
    a, b = _sweep(2).runs.order_by("ordinal")
    api = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{a.pk}").json()["ids"][0]
    for query in (f"runs={a.pk},{a.pk}", f"ids={a.pk},{b.pk},{a.pk}", f"run={a.pk}&run={a.pk}"):
        status, html = _page(viewer, query)
        assert status == 400, query
        assert f'<div class="notice bad" role="alert"><p>{api[0].upper() + api[1:]}.</p></div>' in html, query
        assert "not ranked" not in html and "Side by side" not in html  # nothing compared
    # the values typed stay in the form
    status, html = _page(viewer, f"runs={a.pk},{a.pk}&sweeps=")
    assert f'name="runs" value="{a.pk},{a.pk}"' in html


def test_the_page_refuses_a_sweep_id_given_twice_naming_both_repeats(viewer) -> None:
    sweep = _sweep(2)
    a = sweep.runs.first()
    status, html = _page(viewer, f"runs={a.pk},{a.pk}&sweeps={sweep.pk},{sweep.pk}")
    assert status == 400
    assert f"Repeated run id: {a.pk} (2 times); give each once." in html
    assert f"Repeated sweep id: {sweep.pk} (2 times); give each once." in html
    assert f'name="sweeps" value="{sweep.pk},{sweep.pk}"' in html


def test_the_page_refuses_sweeps_alone_with_fewer_than_two_runs_as_the_api_does(viewer, viewer_api) -> None:
    one, empty = _sweep(1), _sweep(0)
    for query in (f"sweeps={one.pk}", f"sweeps={empty.pk}", f"sweeps={one.pk},{empty.pk}"):
        api = viewer_api.get(f"/api/runs/compare/?{query}").json()["sweeps"][0]
        assert api.endswith("add runs with ids= or another sweep")
        # the page names its own field for run ids, runs=
        api = api.replace("ids=", "runs=")
        # sent by the form: the API's 400 in its words
        status, html = _page(viewer, query + "&compare=1")
        assert status == 400, query
        assert f'<div class="notice bad" role="alert"><p>{api[0].upper() + api[1:]}.</p></div>' in html, query
        assert "Add at least one more run" not in html
        assert f'name="sweeps" value="{query.removeprefix("sweeps=")}"' in html
        # given by a link: the form with the sweeps filled in and the reason as a hint, as one run by a link
        status, html = _page(viewer, query)
        assert status == 200, query
        assert f'<div class="empty"><p>{api[0].upper() + api[1:]}.</p></div>' in html, query
        assert 'role="alert"' not in html and "Side by side" not in html
        assert f'name="sweeps" value="{query.removeprefix("sweeps=")}"' in html
    # the same refusal as a CSV export: the form with the reason, not a download
    status, html = _page(viewer, f"sweeps={one.pk}&format=csv")
    assert status == 400 and f"Sweep {one.pk} has 1 run; a comparison needs at least two" in html
    # a sweep with two runs, and a one-run sweep with a run by id, are compared
    two = _sweep(2)
    assert _page(viewer, f"sweeps={two.pk}")[0] == 200
    other = two.runs.first()
    status, html = _page(viewer, f"runs={other.pk}&sweeps={one.pk}")
    assert status == 200 and "Side by side" in html


def test_the_page_opened_with_nothing_asked_shows_the_prompt(viewer) -> None:
    for query in ("", "runs=&sweeps="):
        status, html = _page(viewer, query)
        assert status == 200, query
        assert "Choose runs or sweeps to compare." in html and 'role="alert"' not in html


def test_the_page_refuses_one_run_by_id_sent_by_a_form_as_the_api_does(viewer, viewer_api) -> None:
    one = _sweep(1)
    run = one.runs.get()
    api = viewer_api.get(f"/api/runs/compare/?ids={run.pk}")
    assert api.status_code == 400 and api.json() == {"ids": [f"only run {run.pk} was given; give at least two runs "
                                                             "to compare"]}
    for query, typed in ((f"runs={run.pk}&compare=1", str(run.pk)), (f"ids={run.pk}&compare=1", str(run.pk)),
                         (f"run={run.pk}", str(run.pk)), (f"runs={run.pk}&format=csv", str(run.pk))):
        status, html = _page(viewer, query)
        assert status == 400, query
        assert (f'<div class="notice bad" role="alert"><p>Only run {run.pk} was given; give at least two runs to '
                'compare.</p></div>') in html, query
        assert "Add at least one more run" not in html and "Side by side" not in html
        assert f'name="runs" value="{typed}"' in html, query


def test_the_api_says_a_run_given_by_id_is_already_in_the_sweep_given(viewer_api) -> None:
    one, empty = _sweep(1), _sweep(0)
    run = one.runs.get()
    for query, message in (
            (f"ids={run.pk}&sweeps={one.pk}", f"run {run.pk} is already in sweep {one.pk}"),
            (f"ids={run.pk}&sweeps={empty.pk}", f"sweep {empty.pk} has no runs, leaving run {run.pk} alone"),
            (f"ids={run.pk}&sweeps={one.pk},{empty.pk}",
             f"run {run.pk} is already in sweep {one.pk} and sweep {empty.pk} has no runs")):
        response = viewer_api.get(f"/api/runs/compare/?{query}")
        assert response.status_code == 400, query
        assert response.json() == {"ids": [f"{message}; give at least two runs to compare"]}, query
    # a run id that names no run is named as such, not as a run left alone
    response = viewer_api.get(f"/api/runs/compare/?ids=999&sweeps={empty.pk}")
    assert (response.status_code, response.json()) == (400, {"ids": ["no run with id 999"]})


def test_the_page_says_a_run_given_by_id_is_already_in_the_sweep_given(viewer, viewer_api) -> None:
    one = _sweep(1)
    run = one.runs.get()
    api = viewer_api.get(f"/api/runs/compare/?ids={run.pk}&sweeps={one.pk}").json()["ids"][0]
    assert api == f"run {run.pk} is already in sweep {one.pk}; give at least two runs to compare"
    # sent by the form: the API's 400 in its words, the form kept
    for query in (f"runs={run.pk}&sweeps={one.pk}&compare=1", f"ids={run.pk}&sweeps={one.pk}&format=csv"):
        status, html = _page(viewer, query)
        assert status == 400, query
        assert f'<div class="notice bad" role="alert"><p>{api[0].upper() + api[1:]}.</p></div>' in html, query
        assert f'name="runs" value="{run.pk}"' in html and f'name="sweeps" value="{one.pk}"' in html
    # given by a link: a 200 with the form filled in and the reason as a hint
    status, html = _page(viewer, f"runs={run.pk}&sweeps={one.pk}")
    assert status == 200
    assert f'<div class="empty"><p>{api[0].upper() + api[1:]}.</p></div>' in html
    assert 'role="alert"' not in html and "Side by side" not in html
    assert f'name="runs" value="{run.pk}"' in html and f'name="sweeps" value="{one.pk}"' in html


@pytest.mark.parametrize(("page_key", "api_key"), [("runs", "ids"), ("ids", "ids"), ("sweeps", "sweeps")])
def test_the_page_words_a_malformed_id_list_as_the_api_does(viewer, viewer_api, page_key, api_key) -> None:
    api = viewer_api.get(f"/api/runs/compare/?{api_key}=1,8;drop").json()
    assert api == {api_key: ["must be comma-separated integer ids, got '8;drop'"]}
    status, html = _page(viewer, f"{page_key}=1,8;drop")
    assert status == 400
    assert (f'<div class="notice bad" role="alert"><p>{page_key.capitalize()} must be comma-separated integer ids, '
            "got &#x27;8;drop&#x27;.</p></div>") in html
    # the index page's checkboxes (?run=1&run=x) are worded alike, under the list they fill
    status, html = _page(viewer, "run=1&run=x")
    assert status == 400 and "Runs must be comma-separated integer ids, got &#x27;x&#x27;." in html


def test_run_ids_that_name_no_run_are_a_400_under_ids_naming_every_one(viewer_api) -> None:
    a, _ = _sweep(2).runs.order_by("ordinal")
    response = viewer_api.get(f"/api/runs/compare/?ids={a.pk},999")
    assert response.status_code == 400
    assert response.json() == {"ids": ["no run with id 999"]}
    response = viewer_api.get(f"/api/runs/compare/?ids=998,{a.pk},999")
    assert response.status_code == 400
    assert response.json() == {"ids": ["no runs with ids 998, 999"]}


def test_the_page_refuses_run_ids_that_name_no_run_as_the_api_does_with_the_form(viewer, viewer_api) -> None:
    a, _ = _sweep(2).runs.order_by("ordinal")
    api = viewer_api.get(f"/api/runs/compare/?ids={a.pk},999").json()["ids"][0]
    for query in (f"runs={a.pk},999", f"ids={a.pk},999", f"runs={a.pk},999&format=csv"):
        status, html = _page(viewer, query)
        assert status == 400, query
        assert f'<div class="notice bad" role="alert"><p>{api[0].upper() + api[1:]}.</p></div>' in html, query
        assert f'name="runs" value="{a.pk},999"' in html and "Side by side" not in html
    status, html = _page(viewer, "runs=998,999,9223372036854775808")
    assert status == 400 and "No runs with ids 998, 999, 9223372036854775808." in html


def test_sweep_ids_that_name_no_sweep_are_a_400_under_sweeps_naming_every_one(viewer_api) -> None:
    sweep = _sweep(2)
    a, _ = sweep.runs.order_by("ordinal")
    response = viewer_api.get(f"/api/runs/compare/?sweeps={sweep.pk},4242")
    assert response.status_code == 400
    assert response.json() == {"sweeps": ["no sweep with id 4242"]}
    response = viewer_api.get(f"/api/runs/compare/?sweeps=4241,{sweep.pk},4242")
    assert (response.status_code, response.json()) == (400, {"sweeps": ["no sweeps with ids 4241, 4242"]})
    # run ids that name no run are named beside them, each under its own parameter
    response = viewer_api.get(f"/api/runs/compare/?ids={a.pk},999&sweeps=4242")
    assert (response.status_code, response.json()) == (400, {"ids": ["no run with id 999"],
                                                             "sweeps": ["no sweep with id 4242"]})


def test_the_page_refuses_sweep_ids_that_name_no_sweep_as_the_api_does_with_the_form(viewer, viewer_api) -> None:
    sweep = _sweep(2)
    api = viewer_api.get(f"/api/runs/compare/?sweeps=4241,{sweep.pk},4242").json()["sweeps"][0]
    for query in (f"sweeps=4241,{sweep.pk},4242", f"sweeps=4241,{sweep.pk},4242&format=csv"):
        status, html = _page(viewer, query)
        assert status == 400, query
        assert f'<div class="notice bad" role="alert"><p>{api[0].upper() + api[1:]}.</p></div>' in html, query
        assert f'name="sweeps" value="4241,{sweep.pk},4242"' in html and "Side by side" not in html
    status, html = _page(viewer, "runs=999,998&sweeps=4242")
    assert status == 400 and "No runs with ids 999, 998." in html and "No sweep with id 4242." in html
