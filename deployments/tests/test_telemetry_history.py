"""Telemetry history: 1 s rollups (mean or last, nulls skipped; token rates exact from the
engines' counters), batched writes, series for charts, and pruning by age (command, task, beat
schedule)."""
from __future__ import annotations

import functools
from datetime import datetime, timedelta, timezone as dt_timezone

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from deployments.models import DeploymentTelemetry, NodeTelemetry
from deployments.telemetry.history import COUNTERS_KEPT_S, HistoryWriter, rollup, telemetry_prune
from deployments.telemetry.selectors import telemetry_for_deployment, telemetry_for_node
from deployments.telemetry.tasks import telemetry_prune_task
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

T0 = 1_800_000_000  # a whole unix second


def node_sample(*, util: int | None, used: int, cpu: float | None, power: float | None = 100.0) -> dict:
    return {
        "node": "n", "t": 0, "interval_s": 0.5, "nvml": "ok",
        "gpus": [{"index": 0, "uuid": "GPU-0", "name": "H200",
                  "memory": {"used_bytes": used, "free_bytes": 0, "total_bytes": 1000, "reserved_bytes": 0},
                  "utilization_pct": util, "memory_utilization_pct": 0, "power_w": power, "power_limit_w": 700.0,
                  "temperature_c": 40, "sm_clock_mhz": 1980, "mig_mode": False, "unavailable": {}, "processes": []}],
        "host": {"cpu_pct": cpu, "cpu_pct_per_numa": {"0": cpu}, "memory": {"used_bytes": 5, "total_bytes": 9,
                                                                           "available_bytes": 4},
                 "loadavg": [0.1, 0.2, 0.3]},
    }


def deployment_sample(*, tok_s: float | None, process_id: int, running: float, status: str = "ready",
                      gen: float | None = 20.0) -> dict:
    engine = {"running": running, "queued": 0.0, "kv_usage": 0.5, "prompt_tokens_total": 10.0,
              "generation_tokens_total": gen, "gen_tok_s": tok_s, "prompt_tok_s": None, "metrics_error": None}
    return {"deployment_id": 1, "t": 0, "status": status, "tok_s": tok_s, "processes": [
        {"id": process_id, "role": "single", "status": "ready", "health": "healthy", "pid": 1, "cpu_pct": 50.0,
         "cpu_pct_pinned_set": 25.0, "rss_bytes": 100, "gpu_memory_bytes": 2048, "engine": engine}]}


def test_it_rolls_a_second_up_as_means_of_rates_and_last_values_of_states():
    records = [
        {"utilization_pct": 10, "memory_used_bytes": 100, "status": "starting", "gen_tok_s": None},
        {"utilization_pct": None, "memory_used_bytes": 300, "status": "ready", "gen_tok_s": 40.0},
        {"utilization_pct": 30, "memory_used_bytes": 200, "status": "ready", "gen_tok_s": 20.0},
    ]
    assert rollup(records) == {"utilization_pct": 20.0, "memory_used_bytes": 200, "status": "ready",
                               "gen_tok_s": 30.0}
    assert rollup([{"power_w": None}, {"power_w": None}]) == {"power_w": None}  # unknown stays unknown


def test_it_writes_closed_seconds_in_one_batch_every_few_seconds(db):
    node = cpu_node_create(name="hist-node")
    deployment = deployment_row_create(recipe=recipe_row_create(node=node))
    process_id = deployment.processes.get().pk
    clock = [0.0]
    writer = HistoryWriter(node_id=node.pk, flush_every_s=5.0, clock=lambda: clock[0])
    # Two seconds of samples at 2 Hz, then the first sample of a third second.
    for offset, util, used, tok, gen in ((0.1, 10, 100, None, 0.0), (0.6, 30, 200, 40.0, 20.0),
                                         (1.1, 50, 300, 60.0, 45.0), (1.6, None, 400, 80.0, 95.0),
                                         (2.1, 70, 500, 100.0, 145.0)):
        writer.add_node(T0 + offset, node_sample(util=util, used=used, cpu=util))
        writer.add_deployment(deployment.pk, T0 + offset, deployment_sample(tok_s=tok, process_id=process_id,
                                                                            running=util or 0, gen=gen))
        clock[0] += 0.5
        assert writer.flush_if_due() == 0  # not due before 5 s
    assert writer.pending_rows == 4 and NodeTelemetry.objects.count() == 0
    clock[0] = 5.0
    with CaptureQueriesContext(connection) as queries:
        assert writer.flush_if_due() == 4
    inserts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    assert len(inserts) == 2  # one bulk insert per table
    rows = list(NodeTelemetry.objects.filter(node=node).order_by("at"))
    assert [r.at for r in rows] == [datetime.fromtimestamp(T0 + s, tz=dt_timezone.utc) for s in (0, 1)]
    assert [r.samples for r in rows] == [2, 2]
    first, second = rows[0].data, rows[1].data
    assert first["gpus"]["0"]["utilization_pct"] == 20.0 and first["gpus"]["0"]["memory_used_bytes"] == 200
    assert second["gpus"]["0"]["utilization_pct"] == 50.0  # the null sample is skipped, not a 0
    assert second["host_cpu_pct"] == 50.0 and second["cpu_pct_per_numa"] == {"0": 50.0}
    deps = list(DeploymentTelemetry.objects.filter(deployment=deployment).order_by("at"))
    # The process's first second: the mean of its rates; then the counter delta (95 - 20 tokens).
    assert [d.data["tok_s"] for d in deps] == [40.0, 75.0]
    assert deps[1].data["processes"][str(process_id)] == {
        "role": "single", "pid": 1, "gen_tok_s": 75.0, "prompt_tok_s": 0.0, "generation_tokens_total": 95.0,
        "prompt_tokens_total": 10.0, "running": 25.0, "queued": 0.0, "kv_usage": 0.5,
        "gpu_memory_bytes": 2048, "cpu_pct": 50.0, "rss_bytes": 100, "health": "healthy"}
    # At shutdown the open second is written too.
    assert writer.flush(everything=True) == 2
    assert NodeTelemetry.objects.filter(node=node).count() == 3
    # The same second written again (an agent restarted within it) keeps the first row.
    again = HistoryWriter(node_id=node.pk, flush_every_s=0)
    again.add_node(T0 + 0.2, node_sample(util=99, used=1, cpu=1.0))
    again.flush(everything=True)
    assert NodeTelemetry.objects.get(node=node, at=rows[0].at).data["gpus"]["0"]["utilization_pct"] == 20.0


def test_it_skips_rows_of_a_deployment_deleted_before_the_flush(db):
    node = cpu_node_create(name="hist-gone")
    deployment = deployment_row_create(recipe=recipe_row_create(node=node))
    writer = HistoryWriter(node_id=node.pk, flush_every_s=0)
    writer.add_deployment(deployment.pk, T0, deployment_sample(tok_s=1.0, process_id=1, running=1))
    writer.add_deployment(deployment.pk + 999, T0, deployment_sample(tok_s=1.0, process_id=1, running=1))
    writer.add_node(T0, node_sample(util=1, used=1, cpu=1.0))
    assert writer.flush(everything=True) == 2
    assert DeploymentTelemetry.objects.count() == 1


def engine_process(process_id: int, *, role: str = "decode", pid: int | None = 500, gen: float | None = None,
                   prompt: float | None = None, gen_tok_s: float | None = None,
                   prompt_tok_s: float | None = None) -> dict:
    """One process of a ``deployment.sample`` as the sampler sends it: ``gen`` / ``prompt`` the
    engine's counters as last scraped, ``gen_tok_s`` / ``prompt_tok_s`` the scraper's rates."""
    return {"id": process_id, "role": role, "status": "ready", "health": "healthy", "pid": pid, "cpu_pct": 5.0,
            "cpu_pct_pinned_set": None, "rss_bytes": 100, "gpu_memory_bytes": None,
            "engine": {"running": 1.0, "queued": 0.0, "kv_usage": 0.1, "prompt_tokens_total": prompt,
                       "generation_tokens_total": gen, "gen_tok_s": gen_tok_s, "prompt_tok_s": prompt_tok_s,
                       "metrics_error": None if gen is not None else "not scraped yet"}}


def stored_rows(writer: HistoryWriter, deployment, samples: list[tuple[float, list[dict]]]) -> list[dict]:
    """Feed ``(seconds after T0, processes)`` samples to ``writer``, write everything, and return
    the stored rows' ``data`` by second."""
    for offset, processes in samples:
        writer.add_deployment(deployment.pk, T0 + offset, {"deployment_id": deployment.pk, "t": T0 + offset,
                                                           "status": "ready", "tok_s": None,
                                                           "processes": processes})
    writer.flush(everything=True)
    return [r.data for r in DeploymentTelemetry.objects.filter(deployment=deployment).order_by("at")]


def test_it_stores_each_seconds_tokens_from_the_counters_so_the_seconds_add_up(db):
    node = cpu_node_create(name="hist-exact")
    deployment = deployment_row_create(recipe=recipe_row_create(node=node))
    writer = HistoryWriter(node_id=node.pk, flush_every_s=0)
    d = functools.partial(engine_process, 11, role="single")
    # Scrapes at uneven times; a sample without a fresh scrape repeats the last reading.
    rows = stored_rows(writer, deployment, [
        (0.1, [d(gen=0.0, prompt=0.0)]),  # the first scrape: no rate yet
        (0.6, [d(gen=30.0, prompt=12.0, gen_tok_s=60.0, prompt_tok_s=24.0)]),
        (1.05, [d(gen=30.0, prompt=12.0, gen_tok_s=60.0, prompt_tok_s=24.0)]),  # not scraped again yet
        (1.3, [d(gen=110.0, prompt=40.0, gen_tok_s=114.2857, prompt_tok_s=40.0)]),
        (1.9, [d(gen=170.0, prompt=40.0, gen_tok_s=100.0, prompt_tok_s=0.0)]),
    ])
    # The process's first second has nothing earlier to count from: the mean of its rates.
    assert [r["tok_s"] for r in rows] == [60.0, 140.0]
    assert [r["processes"]["11"]["prompt_tok_s"] for r in rows] == [24.0, 28.0]
    assert {k: rows[1]["processes"]["11"][k] for k in ("pid", "generation_tokens_total", "prompt_tokens_total")} == {
        "pid": 500, "generation_tokens_total": 170.0, "prompt_tokens_total": 40.0}
    # The writer keeps the last readings across flushes: a second whose samples carry no fresh
    # scrape stores 0, the next one the tokens since the last reading.
    rows = stored_rows(writer, deployment, [
        (2.2, [d(gen=170.0, prompt=40.0, gen_tok_s=100.0, prompt_tok_s=0.0)]),
        (2.7, [d(gen=170.0, prompt=40.0, gen_tok_s=100.0, prompt_tok_s=0.0)]),
        (3.4, [d(gen=260.0, prompt=52.0, gen_tok_s=60.0, prompt_tok_s=8.0)]),
    ])
    assert [r["tok_s"] for r in rows] == [60.0, 140.0, 0.0, 90.0]
    assert [r["processes"]["11"]["gen_tok_s"] for r in rows] == [60.0, 140.0, 0.0, 90.0]
    assert [r["processes"]["11"]["prompt_tok_s"] for r in rows] == [24.0, 28.0, 0.0, 12.0]
    # From the first second's last reading on, the stored seconds add up to the counters.
    assert sum(r["tok_s"] for r in rows[1:]) == 260.0 - 30.0


def test_it_falls_back_to_the_mean_rate_after_a_reset_a_new_pid_or_an_unknown_counter(db):
    node = cpu_node_create(name="hist-fallback")
    deployment = deployment_row_create(recipe=recipe_row_create(node=node))
    writer = HistoryWriter(node_id=node.pk, flush_every_s=0)
    d = functools.partial(engine_process, 11)
    rows = stored_rows(writer, deployment, [
        (0.5, [d(gen=400.0, gen_tok_s=None)]),
        (1.5, [d(gen=500.0, gen_tok_s=100.0)]),  # exact: 100 tokens
        # The engine restarted on the same pid and port: the counter went down.
        (2.2, [d(gen=12.0, gen_tok_s=None)]),
        (2.7, [d(gen=40.0, gen_tok_s=56.0)]),
        (3.5, [d(gen=100.0, gen_tok_s=75.0)]),  # exact again from the new start: 60 tokens
        # A new process (pid) behind the same row: its first second is the mean of its rates.
        (4.2, [d(pid=501, gen=7.0, gen_tok_s=None)]),
        (4.7, [d(pid=501, gen=30.0, gen_tok_s=46.0)]),
        (5.5, [d(pid=501, gen=80.0, gen_tok_s=62.5)]),  # exact: 50 tokens
        # A failed scrape: the counter unknown for a whole second (rates unknown too).
        (6.5, [d(pid=501, gen=None, gen_tok_s=None)]),
        (7.5, [d(pid=501, gen=125.0, gen_tok_s=22.5)]),  # the tokens since the last reading: 45
        # Not running this second: no pid, nothing measured.
        (8.5, [d(pid=None, gen=None, gen_tok_s=None)]),
    ])
    assert [r["tok_s"] for r in rows] == [None, 100.0, 56.0, 60.0, 46.0, 50.0, None, 45.0, None]
    assert [r["processes"]["11"]["pid"] for r in rows] == [500, 500, 500, 500, 501, 501, 501, 501, None]
    assert [r["processes"]["11"]["generation_tokens_total"] for r in rows] == [
        400.0, 500.0, 40.0, 100.0, 30.0, 80.0, None, 125.0, None]


def test_it_sums_the_deployment_tok_s_over_decode_processes_including_one_that_appears(db):
    node = cpu_node_create(name="hist-pd")
    deployment = deployment_row_create(recipe=recipe_row_create(node=node))
    writer = HistoryWriter(node_id=node.pk, flush_every_s=0)
    prefill = functools.partial(engine_process, 21, role="prefill", pid=600)
    decode = functools.partial(engine_process, 22, role="decode", pid=601)
    second = functools.partial(engine_process, 23, role="decode", pid=602)
    router = engine_process(20, role="router", pid=599)  # no token counters
    rows = stored_rows(writer, deployment, [
        (0.2, [router, prefill(gen=0.0, prompt=0.0), decode(gen=0.0, prompt=0.0)]),
        (0.7, [router, prefill(gen=2.0, prompt=300.0, gen_tok_s=4.0, prompt_tok_s=600.0),
               decode(gen=10.0, prompt=0.0, gen_tok_s=20.0, prompt_tok_s=0.0)]),
        # A second decode worker appears mid-second, with its counter already at 500.
        (1.2, [router, prefill(gen=2.0, prompt=300.0, gen_tok_s=0.0, prompt_tok_s=0.0),
               decode(gen=40.0, prompt=0.0, gen_tok_s=60.0, prompt_tok_s=0.0)]),
        (1.7, [router, prefill(gen=4.0, prompt=600.0, gen_tok_s=4.0, prompt_tok_s=600.0),
               decode(gen=70.0, prompt=0.0, gen_tok_s=60.0, prompt_tok_s=0.0), second(gen=500.0)]),
        (2.2, [router, prefill(gen=4.0, prompt=600.0, gen_tok_s=0.0, prompt_tok_s=0.0),
               decode(gen=95.0, prompt=0.0, gen_tok_s=50.0, prompt_tok_s=0.0),
               second(gen=530.0, gen_tok_s=60.0)]),
        (2.7, [router, prefill(gen=4.0, prompt=600.0, gen_tok_s=0.0, prompt_tok_s=0.0),
               decode(gen=99.0, prompt=0.0, gen_tok_s=8.0, prompt_tok_s=0.0),
               second(gen=537.0, gen_tok_s=14.0)]),
    ])
    procs = [r["processes"] for r in rows]
    assert [p["22"]["gen_tok_s"] for p in procs] == [20.0, 60.0, 29.0]  # first second: the mean
    assert [p.get("23", {}).get("gen_tok_s") for p in procs] == [None, None, 37.0]  # 1 sample, no rate
    # Prefill's tokens are not the deployment's (decode streams them): the decode workers' sum,
    # unknown while one of them is.
    assert [r["tok_s"] for r in rows] == [20.0, None, 29.0 + 37.0]
    assert [p["21"]["prompt_tok_s"] for p in procs] == [600.0, 300.0, 0.0]
    assert [p["20"]["gen_tok_s"] for p in procs] == [None, None, None]


def test_it_forgets_the_counters_of_a_process_gone_for_a_minute(db):
    node = cpu_node_create(name="hist-forget")
    deployment = deployment_row_create(recipe=recipe_row_create(node=node))
    writer = HistoryWriter(node_id=node.pk, flush_every_s=0)
    stays = functools.partial(engine_process, 31, role="prefill", pid=700, gen=0.0)
    goes = functools.partial(engine_process, 32, pid=701)
    samples = [(0.5, [stays(), goes(gen=10.0, gen_tok_s=None)]), (1.5, [stays(), goes(gen=30.0, gen_tok_s=20.0)])]
    samples += [(s + 0.5, [stays()]) for s in range(2, 3 + COUNTERS_KEPT_S)]
    # Back with the same pid after more than COUNTERS_KEPT_S seconds: its reading was dropped.
    samples += [(5.5 + COUNTERS_KEPT_S, [stays(), goes(gen=90.0, gen_tok_s=12.0)])]
    rows = stored_rows(writer, deployment, samples)
    assert [r["tok_s"] for r in rows if "32" in r["processes"]] == [None, 20.0, 12.0]
    # Gone for less: still compared with its last reading.
    writer = HistoryWriter(node_id=node.pk, flush_every_s=0)
    deployment = deployment_row_create(recipe=recipe_row_create(node=node, name="hist-forget-2"))
    rows = stored_rows(writer, deployment, [(0.5, [stays(), goes(gen=10.0)]), (1.5, [stays()]),
                                            (2.5, [stays(), goes(gen=90.0, gen_tok_s=12.0)])])
    assert [r["tok_s"] for r in rows] == [None, None, 80.0]


def _node_rows(node, seconds: list[int], *, gpus: tuple[int, ...] = (0,)) -> None:
    NodeTelemetry.objects.bulk_create([
        NodeTelemetry(node=node, at=datetime.fromtimestamp(T0 + s, tz=dt_timezone.utc), data={
            "gpus": {str(g): {"memory_used_bytes": 1000 * s, "utilization_pct": s, "power_w": 100.0 + s,
                              "temperature_c": 40} for g in gpus if not (g == 1 and s == 1)},
            "host_cpu_pct": float(s), "host_memory_used_bytes": 7})
        for s in seconds
    ])


def test_it_returns_node_series_aligned_in_time_with_gaps_as_null(db):
    node = cpu_node_create(name="hist-series")
    _node_rows(node, [0, 1, 2, 3], gpus=(0, 1))
    series = telemetry_for_node(node_id=node.pk, since=T0 + 1, until=T0 + 3)
    assert series["t"] == [T0 + 1.0, T0 + 2.0, T0 + 3.0] and series["resolution_s"] == 1
    assert series["gpus"]["0"] == {"memory_used_bytes": [1000, 2000, 3000], "utilization_pct": [1, 2, 3],
                                   "power_w": [101.0, 102.0, 103.0], "temperature_c": [40, 40, 40]}
    assert series["gpus"]["1"]["utilization_pct"] == [None, 2, 3]  # GPU 1 missing in second 1: a gap
    assert series["host_cpu_pct"] == [1.0, 2.0, 3.0]
    picked = telemetry_for_node(node_id=node.pk, fields=["power_w", "host_memory_used_bytes"])
    assert set(picked["gpus"]["0"]) == {"power_w"} and picked["host_memory_used_bytes"] == [7] * 4
    assert "host_cpu_pct" not in picked
    with pytest.raises(ValueError, match="unknown field\\(s\\) fan; known: memory_used_bytes"):
        telemetry_for_node(node_id=node.pk, fields=["fan"])


def test_it_thins_long_windows_by_averaging_consecutive_seconds(db):
    node = cpu_node_create(name="hist-thin")
    _node_rows(node, list(range(10)))
    series = telemetry_for_node(node_id=node.pk, max_points=4)
    assert series["resolution_s"] == 3
    assert series["t"] == [T0 + 0.0, T0 + 3.0, T0 + 6.0, T0 + 9.0]
    assert series["host_cpu_pct"] == [1.0, 4.0, 7.0, 9.0]


def test_it_returns_deployment_series_per_process(db):
    node = cpu_node_create(name="hist-dep")
    deployment = deployment_row_create(recipe=recipe_row_create(node=node))
    writer = HistoryWriter(node_id=node.pk, flush_every_s=0)
    for s, tok in ((0, 10.0), (1, None), (2, 30.0)):  # no counters: the rates are stored as sampled
        writer.add_deployment(deployment.pk, T0 + s, deployment_sample(tok_s=tok, process_id=7, running=s,
                                                                       gen=None))
    writer.flush(everything=True)
    series = telemetry_for_deployment(deployment_id=deployment.pk)
    assert series["t"] == [T0 + 0.0, T0 + 1.0, T0 + 2.0]
    assert series["tok_s"] == [10.0, None, 30.0]
    assert series["processes"]["7"]["running"] == [0.0, 1.0, 2.0]
    assert set(series["processes"]["7"]) == {"gen_tok_s", "running", "queued", "kv_usage", "gpu_memory_bytes",
                                             "cpu_pct"}


def test_it_prunes_rows_older_than_the_retention(db, settings):
    node = cpu_node_create(name="hist-prune")
    deployment = deployment_row_create(recipe=recipe_row_create(node=node))
    now = timezone.now().replace(microsecond=0)
    for days in (0, 2, 8, 30):
        NodeTelemetry.objects.create(node=node, at=now - timedelta(days=days), data={})
        DeploymentTelemetry.objects.create(deployment=deployment, at=now - timedelta(days=days), data={})
    settings.CEILING_TELEMETRY_RETENTION_DAYS = 7
    assert telemetry_prune_task() == {"node_rows": 2, "deployment_rows": 2}
    call_command("prune_telemetry", "--older-than-days", "1", stdout=(out := __import__("io").StringIO()))
    assert out.getvalue().strip() == "deleted 1 node and 1 deployment telemetry rows older than 1 days"
    assert NodeTelemetry.objects.count() == 1 and DeploymentTelemetry.objects.count() == 1
    with pytest.raises(CommandError, match="--older-than-days must be a number of days from 0 to 36500, got -1"):
        call_command("prune_telemetry", "--older-than-days", "-1")
    assert telemetry_prune(older_than_days=0) == {"node_rows": 1, "deployment_rows": 1}


def test_it_has_beat_prune_hourly_with_a_registered_task():
    entry = settings.CELERY_BEAT_SCHEDULE["telemetry-prune"]
    assert entry == {"task": "deployments.telemetry.tasks.telemetry_prune_task", "schedule": 3600.0}
    from controlplane.celery import app

    app.loader.import_default_modules()
    assert entry["task"] in app.tasks


def test_prune_telemetry_refuses_an_age_outside_its_range_in_one_line(db):
    for raw, shown in (("1000000", "1000000"), ("1e400", "Infinity"), ("nan", "NaN"), ("-5", "-5"), ("36500.5", "36500.5")):
        with pytest.raises(CommandError) as err:
            call_command("prune_telemetry", "--older-than-days", raw)
        assert str(err.value) == f"--older-than-days must be a number of days from 0 to 36500, got {shown}", raw
    call_command("prune_telemetry", "--older-than-days", "36500", stdout=(out := __import__("io").StringIO()))
    assert out.getvalue().strip() == "deleted 0 node and 0 deployment telemetry rows older than 36500 days"
