"""Every problem of a query is named in one 400, on every list endpoint and read alike
(controlplane.drf_defaults.query_problems): a key not taken, a key given twice, a filter given empty,
a value of the wrong type or outside its choices, a bad limit or offset. A 400 that named the first
kind alone would have the client fix one problem, resend, and meet the next."""
from __future__ import annotations

import pytest

from benchmarks.models import BenchmarkRun

UNKNOWN = "unknown field '{key}'; allowed: {allowed}"
LIMIT_0 = ["must be a whole number >= 1, got '0'"]
NOT_AN_ID = ["must be a whole number between 1 and 2147483647, got 'abc'"]


def _empty(key: str) -> list[str]:
    return [f"filter '{key}' is empty: give a value or leave it out"]


def test_an_empty_filter_does_not_hide_a_bad_value(viewer_api, rows):
    answer = viewer_api.get("/api/runs/?status=&sweep=abc")
    assert answer.status_code == 400
    assert answer.json() == {"status": _empty("status"), "sweep": NOT_AN_ID}


def test_an_unknown_key_does_not_hide_a_bad_value_or_a_bad_limit(viewer_api, rows):
    answer = viewer_api.get("/api/runs/?sweep=abc&limit=0&foo=1")
    assert answer.status_code == 400
    allowed = "sweep, source, status, order, limit, offset, format"
    assert answer.json() == {"foo": [UNKNOWN.format(key="foo", allowed=allowed)], "sweep": NOT_AN_ID, "limit": LIMIT_0}


def test_a_bad_value_does_not_hide_a_bad_limit(viewer_api, rows):
    answer = viewer_api.get("/api/runs/?sweep=abc&limit=0&offset=-1")
    assert answer.status_code == 400
    assert answer.json() == {"sweep": NOT_AN_ID, "limit": LIMIT_0,
                             "offset": ["must be a whole number between 0 and 999999999999999, got '-1'"]}


def test_a_key_given_twice_does_not_hide_the_others(viewer_api, rows):
    answer = viewer_api.get("/api/runs/?sweep=abc&sweep=2&limit=0&status=x&foo=1")
    assert answer.status_code == 400
    body = answer.json()
    assert body["sweep"] == ["is given 2 times (abc, 2): give it once"]
    assert body["limit"] == LIMIT_0
    assert body["status"] == ["must be one of running, done, failed, cancelled; got 'x'"]
    assert set(body) == {"sweep", "limit", "status", "foo"}


#: Each list endpoint with a filter given empty, a filter with a bad value, a bad limit or offset
#: and an unknown key, and the keys the 400 must name.
LISTS = [
    ("/api/recipes/?engine=nope&topology=&limit=abc&foo=1", {"engine", "topology", "limit", "foo"}),
    ("/api/deployments/?recipe=abc&status=&offset=-1&foo=1", {"recipe", "status", "offset", "foo"}),
    ("/api/processes/?deployment=abc&role=&limit=0&foo=1", {"deployment", "role", "limit", "foo"}),
    ("/api/sweeps/?deployment=abc&status=&limit=0&foo=1", {"deployment", "status", "limit", "foo"}),
    ("/api/runs/?sweep=abc&status=&limit=0&foo=1", {"sweep", "status", "limit", "foo"}),
    ("/api/kernel-jobs/?status=bogus&package=&limit=0&foo=1", {"status", "package", "limit", "foo"}),
    ("/api/kernel-best/?batch=abc&device=&limit=0&foo=1", {"batch", "device", "limit", "foo"}),
    ("/api/nodes/?limit=0&foo=1", {"limit", "foo"}),
    ("/api/kernel-packages/?offset=x&foo=1", {"offset", "foo"}),
]


@pytest.mark.parametrize("url, keys", LISTS)
def test_every_list_names_every_problem_of_its_query_at_once(viewer_api, rows, url, keys):
    answer = viewer_api.get(url)
    assert answer.status_code == 400, (url, answer.content)
    assert set(answer.json()) == keys, (url, answer.json())


@pytest.mark.parametrize("url, keys", [
    ("/api/runs/{run}/records/?limit=0&offset=abc&foo=1", {"limit", "offset", "foo"}),
    ("/api/recipes/{recipe}/versions/?limit=0&foo=1", {"limit", "foo"}),
    ("/api/deployments/{deployment}/events/?limit=0&offset=x&foo=1", {"limit", "offset", "foo"}),
    ("/api/deployments/{deployment}/telemetry/?since=abc&until=&foo=1", {"since", "until", "foo"}),
    ("/api/recipes/{recipe}/diff/?a=abc&b=1&b=2", {"a", "b"}),
    ("/api/kernel-whatif/?sweep=abc&share=&foo=1", {"sweep", "share", "foo"}),
    ("/api/kernel-whatif/?sweep=1&sweep=2&share=abc&foo=1", {"sweep", "share", "foo"}),
])
def test_other_reads_name_every_problem_at_once_too(viewer_api, rows, url, keys):
    answer = viewer_api.get(url.format(**rows))
    assert answer.status_code == 400, (url, answer.content)
    assert set(answer.json()) == keys, (url, answer.json())


def test_a_key_left_out_is_named_once_the_querys_own_problems_are_gone(viewer_api, rows):
    url = f"/api/recipes/{rows['recipe']}/diff/"
    # an empty a is named alone: the b left out is the diff's to name, once a is given
    assert viewer_api.get(f"{url}?a=").json() == {"a": ["query parameter 'a' is empty: give a value or leave it out"]}
    assert "b" in viewer_api.get(f"{url}?a=1").json()


def test_a_good_query_still_answers(viewer_api, rows):
    answer = viewer_api.get(f"/api/runs/?sweep={rows['sweep']}&status=done&limit=1&offset=0")
    assert answer.status_code == 200 and answer.json()["count"] == 1


ORDERS = "-created_at, -output_tok_s, -ttft_p99_ms, created_at, output_tok_s, ttft_p99_ms"
NOT_IDS = "must be comma-separated integer ids, got 'abc'"
OFFSET_X = ["must be a whole number between 0 and 999999999999999, got 'x'"]

#: Each list and compare endpoint with two bad parameters (each a value refused on its own, or two
#: values refused together), and the whole 400 body, which names both.
TWO_BAD = [
    ("/api/runs/?order=zzz&status=bogus",
     {"order": [f"must be one of {ORDERS}; got 'zzz'"],
      "status": ["must be one of running, done, failed, cancelled; got 'bogus'"]}),
    ("/api/runs/?order=zzz&limit=0", {"order": [f"must be one of {ORDERS}; got 'zzz'"], "limit": LIMIT_0}),
    ("/api/runs/compare/?ids=1,2&baseline=x&sweeps=abc",
     {"sweeps": [NOT_IDS], "baseline": ["takes one run id (e.g. 3), got 'x'"]}),
    ("/api/runs/compare/?ids=abc&format=xml",
     {"ids": [NOT_IDS], "format": ["must be one of json, csv, api; got 'xml'"]}),
    ("/api/runs/compare/?ids=1,1&baseline=x",
     {"ids": ["repeated run id: 1 (2 times); give each once"], "baseline": ["takes one run id (e.g. 3), got 'x'"]}),
    ("/api/runs/compare/?ids={run}&baseline=999",
     {"ids": ["only run {run} was given; give at least two runs to compare"],
      "baseline": ["run #999 is not one of the compared runs (#{run})"]}),
    ("/api/runs/compare/?ids={run},998&baseline=999",
     {"ids": ["no run with id 998"], "baseline": ["run #999 is not one of the compared runs (#{run}, #998)"]}),
    ("/api/sweeps/?deployment=abc&status=bogus",
     {"deployment": NOT_AN_ID,
      "status": ["must be one of pending, waiting, running, done, failed, cancelled; got 'bogus'"]}),
    ("/api/recipes/?engine=bad&topology=bad",
     {"engine": ["must be one of sglang, vllm, llamacpp, sim; got 'bad'"],
      "topology": ["must be one of single, pd; got 'bad'"]}),
    ("/api/deployments/?recipe=abc&status=bogus",
     {"recipe": NOT_AN_ID,
      "status": ["must be one of pending, starting, ready, stopping, stopped, failed; got 'bogus'"]}),
    ("/api/processes/?deployment=abc&role=bogus",
     {"deployment": NOT_AN_ID, "role": ["must be one of prefill, decode, single, router; got 'bogus'"]}),
    ("/api/nodes/?limit=0&offset=x", {"limit": LIMIT_0, "offset": OFFSET_X}),
    ("/api/secrets/?limit=0&offset=x", {"limit": LIMIT_0, "offset": OFFSET_X}),
    ("/api/kernel-packages/?limit=0&offset=x", {"limit": LIMIT_0, "offset": OFFSET_X}),
    ("/api/kernel-jobs/?status=bogus&limit=0",
     {"status": ["must be one of pending, building, benchmarking, done, failed, cancelled; got 'bogus'"],
      "limit": LIMIT_0}),
    ("/api/kernel-best/?batch=abc&offset=x", {"batch": NOT_AN_ID, "offset": OFFSET_X}),
    ("/api/kernel-whatif/?sweep=abc&share=2&speedup=2",
     {"sweep": NOT_AN_ID, "share": ["must be a fraction in (0, 1]: the part of the decode step time the kernel "
                                    "takes (0.63 = 63%; at 0 there is nothing to speed up), got 2"]}),
    ("/api/kernel-whatif/?sweep=abc&speedup=2&best=3",
     {"sweep": NOT_AN_ID, "speedup": ["give speedup (a number) or best (a best-variant id), exactly one"]}),
    ("/api/recipes/{recipe}/versions/?limit=0&offset=x", {"limit": LIMIT_0, "offset": OFFSET_X}),
    ("/api/deployments/{deployment}/events/?limit=0&offset=x", {"limit": LIMIT_0, "offset": OFFSET_X}),
    ("/api/runs/{run}/records/?limit=0&offset=x",
     {"limit": ["must be a whole number between 1 and 5000, got '0'"], "offset": OFFSET_X}),
    ("/api/nodes/{node}/telemetry/?since=10&until=5&fields=a,,b",
     {"since": ["must not be after until"], "fields": ["item 2 is empty: give fields as power_w,host_cpu_pct"]}),
    ("/api/nodes/{node}/telemetry/?since=abc&fields=a,,b",
     {"since": ["must be a number of unix seconds between 0 and 253402300799, got 'abc'"],
      "fields": ["item 2 is empty: give fields as power_w,host_cpu_pct"]}),
]


@pytest.mark.parametrize("url, body", TWO_BAD)
def test_two_bad_parameters_are_both_named(admin_api, rows, url, body):
    answer = admin_api.get(url.format(**rows))
    assert answer.status_code == 400, (url, answer.content)
    assert answer.json() == {key: [m.format(**rows) for m in messages] for key, messages in body.items()}, url


def test_every_offset_is_refused_in_the_same_words(viewer_api, rows):
    # a list's offset, a paged read's and a run's records' alike: the range, then the value
    for url in ("/api/runs/", f"/api/recipes/{rows['recipe']}/versions/", f"/api/runs/{rows['run']}/records/"):
        for raw in ("-1", "abc", "1000000000000000"):
            answer = viewer_api.get(url, {"offset": raw})
            assert answer.json() == {"offset": [f"must be a whole number between 0 and 999999999999999, got '{raw}'"]}, url


def test_a_good_order_and_comparison_still_answer(viewer_api, rows):
    assert viewer_api.get("/api/runs/?order=-ttft_p99_ms").status_code == 200
    other = BenchmarkRun.objects.create(sweep_id=rows["sweep"], status="done", concurrency=2, input_len=8,
                                        output_len=8).pk
    answer = viewer_api.get(f"/api/runs/compare/?ids={rows['run']},{other}&baseline=\"{other}\"")
    assert answer.status_code == 200 and answer.json()["baseline"] == other
