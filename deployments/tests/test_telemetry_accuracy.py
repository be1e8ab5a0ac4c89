"""Accuracy of the stored telemetry for a short burst: every generated token is counted once
(the 1 s rows of tok/s add up to the engine's token counter, exactly), and a 2 Hz sampler reads
a fresh engine scrape in every sample.

Two defects made a 256-token burst on a freshly started ``sim`` show about half its tokens:

* an engine exports its token counters only from its first token on (``sim`` and SGLang create
  the labelled series lazily; before, only the ``# TYPE`` line), the counter read None, and the
  first scrape that saw it gave no rate at all, so every token up to that scrape was lost;
* the scraper's "at most every 0.5 s" test was exact, so at the default 2 Hz a sample that began
  a millisecond early skipped its scrape: about half the samples reused the previous reading,
  the rollup's mean of rates then weighed a reading of 1 s like one of 0.5 s, and gauges such as
  running requests were read once a second and up to 0.5 s late.

With both fixed, a mean of the second's rates was still only close (a 4-request PD burst of 65
decode tokens summed to 69.6): it weighs every sample's rate alike, whatever interval the rate
was measured over, and those intervals do not line up with the seconds. A second's row now
stores the tokens its counter readings grew by (:mod:`deployments.telemetry.history`).
"""
from __future__ import annotations

import sys
import threading
import time
import uuid

import httpx
import pytest

from deployments.choices import DeploymentStatus, ProcessStatus
from deployments.models import Deployment, DeploymentTelemetry, Node, NumaNode, Recipe, ServerProcess
from deployments.supervisor.procfs import proc_start_ticks
from deployments.telemetry.engine import MetricsScraper, ScrapeTarget, reading_from_text
from deployments.telemetry.loop import LoopThread
from deployments.telemetry.sampler import NodeSampler
from deployments.tests.test_sim_server import Proc, free_port, metric, procs, start_pd, start_sim, wait_for  # noqa: F401

pytestmark = [pytest.mark.timeout(120)]

DECLARED = ("# TYPE sglang:generation_tokens counter\n"
            "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"m\"} 0\n")
ABSENT = "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"m\"} 0\n"


def gen(total: float) -> str:
    return f"# TYPE sglang:generation_tokens counter\nsglang:generation_tokens_total{{model_name=\"m\"}} {total}\n"


def test_a_declared_token_counter_without_a_series_is_zero():
    # What ``sim`` and SGLang export before their first token: the TYPE line, no sample.
    state: dict = {}
    before = reading_from_text(DECLARED, t=10.0, identity=(42, 7), state=state, key="p")
    assert before.generation_tokens_total == 0.0 and before.gen_tok_s is None  # nothing to compare with
    idle = reading_from_text(DECLARED, t=10.5, identity=(42, 7), state=state, key="p")
    assert idle.gen_tok_s == 0.0  # known: nothing generated, not "unknown"
    first = reading_from_text(gen(204), t=11.0, identity=(42, 7), state=state, key="p")
    assert first.gen_tok_s == 408.0


def test_a_token_counter_that_appears_counts_from_zero():
    # A multiprocess exposition has not even the TYPE line until the first token.
    state: dict = {}
    before = reading_from_text(ABSENT, t=10.0, identity=(42, 7), state=state, key="p")
    assert before.generation_tokens_total is None and before.gen_tok_s is None
    appeared = reading_from_text(gen(204), t=10.5, identity=(42, 7), state=state, key="p")
    assert appeared.gen_tok_s == 408.0
    # A process seen for the first time with the counter already there: its past is unknown.
    assert reading_from_text(gen(300), t=11.0, identity=(43, 1), state=state, key="p").gen_tok_s is None


def test_a_2hz_sampler_scrapes_in_every_sample_despite_jitter():
    clock = [100.0]
    loop = LoopThread(name="accuracy-test")
    scraper = MetricsScraper(loop=loop, clock=lambda: clock[0])
    target = ScrapeTarget(key=1, url="http://127.0.0.1:9/metrics", engine="sim", identity=(1, 1))
    try:
        assert scraper.request([target], wait_s=5.0) == 1
        # The next sample began a millisecond short of 0.5 s after the last (scheduling jitter).
        clock[0] += 0.499
        assert scraper.request([target], wait_s=5.0) == 1
        # Still no faster than the scraper's period by much: a sampler at 10 Hz is not scraped
        # every 0.1 s.
        clock[0] += 0.1
        assert scraper.request([target], wait_s=5.0) == 0
    finally:
        scraper.close()
        loop.close()


def _generate(base: str, tokens: int) -> None:
    resp = httpx.post(f"{base}/generate", json={"text": "hello world", "sampling_params": {
        "max_new_tokens": tokens, "ignore_eos": True}}, timeout=30, trust_env=False)
    assert resp.status_code == 200, resp.text
    assert resp.json()["meta_info"]["completion_tokens"] == tokens


#: Seconds of samples before the load: at least two whole seconds, so a second with a counter
#: reading is closed before the first token (the first second of a process is a mean of rates).
IDLE_S = 2.2
#: Seconds of samples after the load: three more samples at 2 Hz.
AFTER_S = 1.6


def _sample_around(sampler: NodeSampler, load: threading.Thread) -> None:
    """Drive ``sampler`` as :meth:`NodeSampler.run` does, on this thread (the test's database
    connection): :data:`IDLE_S` of samples before ``load`` starts (the engines' counters are
    read before any token), then until :data:`AFTER_S` after it ended (its last tokens are
    scraped); then close the sampler, which writes the history."""
    try:
        next_at = started = ended = time.monotonic()
        while True:
            sampler.sample_once()
            now = time.monotonic()
            if now - started >= IDLE_S and not load.is_alive():
                if load.ident is None:
                    load.start()
                    ended = now
                elif now - ended >= AFTER_S:
                    break
            if load.is_alive():
                ended = now
            next_at += sampler.interval_s
            now = time.monotonic()
            time.sleep(max(0.0, next_at - now))
    finally:
        if load.ident is not None:
            load.join(timeout=30)
        sampler.close()


@pytest.mark.slow
def test_the_stored_rollups_of_a_burst_add_up_to_its_tokens(db, procs, tmp_path):  # noqa: F811
    """A fresh ``sim`` (demo-fast), the real sampler at 2 Hz, 256 tokens in about 1.05 s with one
    or two requests in flight all along: the per-second tok/s rows sum to exactly 256 and the
    running-requests series shows the load."""
    base, sim = start_sim(procs, tmp_path, "single", delay=0.0)
    deadline = time.monotonic() + 30
    while httpx.get(f"{base}/health", timeout=2, trust_env=False).status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    node = Node.objects.create(name=f"acc-{uuid.uuid4().hex[:8]}", hostname="here", cpu_count=1)
    NumaNode.objects.create(node=node, index=0, cpus="0")
    recipe = Recipe.objects.create(name=f"r-{uuid.uuid4().hex[:8]}", engine="sim", topology="single", node=node)
    deployment = Deployment.objects.create(recipe=recipe, recipe_version=1, node=node, status=DeploymentStatus.READY)
    port = int(base.rsplit(":", 1)[1])
    row = ServerProcess.objects.create(
        deployment=deployment, role="single", ordinal=0, status=ProcessStatus.READY, pid=sim.popen.pid,
        start_ticks=proc_start_ticks(sim.popen.pid), cpus="0", effective_cpus="0", ports={"http": port},
        health_url=f"http://127.0.0.1:{port}/health")

    sampler = NodeSampler(node_name=node.name, hz=2.0, nvml=None, nvidia_smi=None, publish=False)
    sampler.history.flush_every_s = 3600.0  # one write, at close
    # Before the load the counter does not exist yet (only its TYPE line).
    _sample_around(sampler, threading.Thread(target=_burst, args=(base,)))

    exposition = httpx.get(f"{base}/metrics", timeout=5, trust_env=False).text
    assert 'sglang:generation_tokens_total{model_name="sim-model"} 256.0' in exposition
    rows = list(DeploymentTelemetry.objects.filter(deployment=deployment).order_by("at"))
    rates = [r.data["tok_s"] for r in rows]
    running = [r.data["processes"][str(row.pk)]["running"] for r in rows]
    samples = [r.samples for r in rows]
    # A 1 s row's tok/s is the tokens of that second: summed over the seconds, the tokens.
    assert rates[0] in (0.0, None) and sum(r for r in rates if r is not None) == 256.0, (rates, samples)
    assert len([r for r in rates if r]) >= 2, (rates, samples)  # the burst spans seconds
    assert max(v for v in running if v is not None) > 0, (running, samples)


@pytest.mark.slow
def test_the_stored_tok_s_of_a_pd_burst_adds_up_to_the_decode_counter(db, procs, tmp_path):  # noqa: F811
    """A PD deployment of fresh ``sim`` workers (demo-fast) behind the real router, the real
    sampler at 2 Hz scraping all three, four requests of different lengths started 0.3 s apart:
    the stored per-second tok/s add up to the decode engine's generation counter, token for
    token, and the prefill's per-second prompt rates to its prompt counter."""
    pd = start_pd(procs, tmp_path)
    prefill, prefill_proc, decode, decode_proc = pd.prefill_url, pd.prefill, pd.decode_url, pd.decode
    base, router, router_port, prom_port = pd.router_url, pd.router, pd.router_port, pd.prometheus_port
    node = Node.objects.create(name=f"acc-{uuid.uuid4().hex[:8]}", hostname="here", cpu_count=1)
    NumaNode.objects.create(node=node, index=0, cpus="0")
    recipe = Recipe.objects.create(name=f"r-{uuid.uuid4().hex[:8]}", engine="sim", topology="pd", node=node)
    deployment = Deployment.objects.create(recipe=recipe, recipe_version=1, node=node, status=DeploymentStatus.READY)
    rows_by_role = {}
    for role, url, proc, ports in (("prefill", prefill, prefill_proc, None), ("decode", decode, decode_proc, None),
                                   ("router", base, router, {"http": router_port, "metrics": prom_port})):
        port = int(url.rsplit(":", 1)[1])
        rows_by_role[role] = ServerProcess.objects.create(
            deployment=deployment, role=role, ordinal=0, status=ProcessStatus.READY, pid=proc.popen.pid,
            start_ticks=proc_start_ticks(proc.popen.pid), cpus="0", effective_cpus="0",
            ports=ports or {"http": port}, health_url=f"http://127.0.0.1:{port}/health")

    sampler = NodeSampler(node_name=node.name, hz=2.0, nvml=None, nvidia_smi=None, publish=False)
    sampler.history.flush_every_s = 3600.0  # one write, at close
    lengths = (40, 90, 140, 190)
    _sample_around(sampler, threading.Thread(target=_staggered, args=(base, lengths)))

    generated = metric(decode, "sglang:generation_tokens_total")
    prompted = metric(prefill, "sglang:prompt_tokens_total")
    assert generated >= sum(lengths)
    rows = [r.data for r in DeploymentTelemetry.objects.filter(deployment=deployment).order_by("at")]
    decode_id, prefill_id = str(rows_by_role["decode"].pk), str(rows_by_role["prefill"].pk)
    rates = [r["tok_s"] for r in rows]
    counters = [r["processes"][decode_id]["generation_tokens_total"] for r in rows]
    # The first stored second is a mean of rates (nothing earlier to count from); its counter
    # reading was taken before any token.
    assert counters[0] is not None and rates[0] in (0.0, None), (rates, counters)
    assert counters[-1] == generated, (rates, counters)  # the last tokens were scraped
    # Every later second: the decode tokens of that second; summed, the decode counter's delta.
    assert None not in rates[1:] and sum(rates[1:]) == generated - counters[0], (rates, counters)
    assert rates[1:] == [r["processes"][decode_id]["gen_tok_s"] for r in rows[1:]]  # prefill, router excluded
    assert len([r for r in rates if r]) >= 2, rates  # the burst spans seconds
    prompts = [r["processes"][prefill_id]["prompt_tok_s"] for r in rows]
    first = rows[0]["processes"][prefill_id]["prompt_tokens_total"]
    assert sum(prompts[1:]) == prompted - first, (prompts, first, prompted)


def _staggered(base: str, lengths: tuple[int, ...]) -> None:
    # Four requests through the router, 0.3 s apart, so they overlap and end at different times.
    workers = []
    for tokens in lengths:
        workers.append(threading.Thread(target=_generate, args=(base, tokens)))
        workers[-1].start()
        time.sleep(0.3)
    for worker in workers:
        worker.join()


def _burst(base: str) -> None:
    # 128 tokens alone (about 0.65 s at 200 tok/s in demo-fast), then 64 each for two at once
    # (about 0.4 s at 6 ms a step): no pause, so a sample cannot keep landing between requests.
    _generate(base, 128)
    pair = [threading.Thread(target=_generate, args=(base, 64)) for _ in range(2)]
    for worker in pair:
        worker.start()
    for worker in pair:
        worker.join()
