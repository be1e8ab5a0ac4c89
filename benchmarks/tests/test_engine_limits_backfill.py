"""A deployment ready before its engine servers' report was kept (``engine_limits`` null) gets it
when a sweep of it starts, so the next sweep creation is judged against it; and an SGLang-style
server that reports ``context_length`` null gives its context from ``/v1/models``' ``max_model_len``.
Real sim engine processes throughout."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkSweep
from benchmarks.services import sweep_create, sweep_execute
from benchmarks.services.sweeps import engine_limits_backfill
from benchmarks.sweeps import grid_context_problems
from benchmarks.tests.sweep_support import sim_deployment_create, sim_start
from controlplane.errors import InvalidInput
from deployments.engine_limits import deployment_limits_read
from deployments.models import Deployment

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180), pytest.mark.django_db(transaction=True)]

SEED = "seed-sm120-fallback"  # KV 5,376 tokens, context 65,536, chunk 1,024
READ_AT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path
    settings.CEILING_REALTIME_MIN_INTERVAL_S = 0.0


@pytest.fixture
def seed_sim(tmp_path: Path):
    procs = []

    def start(*extra: str) -> str:
        base, proc = sim_start(tmp_path / f"sim{len(procs)}.log", profile=SEED, time_scale=0.05, extra=extra)
        procs.append(proc)
        return base

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


def _when(read_at: str) -> str:
    return read_at.replace("T", " ").replace("Z", " UTC")


def test_a_sweep_start_stores_the_report_a_deployment_ready_before_it_lacks(seed_sim, operator):
    base = seed_sim()
    # Ready with no report kept; its recipe's demo-fast profile states KV 32,768 and context 8,192.
    deployment = sim_deployment_create(base_url=base)
    assert deployment.engine_limits is None
    # 6000:4 fits the recipe's word, so it would be accepted now.
    assert grid_context_problems({"lengths": [[6000, 4]]}, spec=deployment.spec_snapshot, engine="sim",
                                 reported=deployment.engine_limits) == {}
    first = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [1], "lengths": ["16:8"], "requests": 1})
    assert sweep_execute(sweep_id=first.pk) == SweepStatus.DONE

    limits = Deployment.objects.get(pk=deployment.pk).engine_limits
    assert READ_AT.match(limits["read_at"]) and limits["topology"] == "single" and limits["error"] is None
    assert limits["servers"] == {"single0": {
        "base_url": base, "read_from": [f"{base}/get_server_info"], "max_total_num_tokens": 5376,
        "context_length": 65536, "max_running_requests": 32, "chunked_prefill_size": 1024,
        "admission_reserve_tokens": 16, "error": None}}

    # The next creation is judged against that report.
    source = f"reported by the single server's /get_server_info at {_when(limits['read_at'])}: max_total_num_tokens 5376"
    with pytest.raises(InvalidInput) as exc:
        sweep_create(deployment=Deployment.objects.get(pk=deployment.pk), user=operator,
                     grid={"concurrency": [1], "lengths": ["6000:4"], "requests": 1})
    assert exc.value.errors == {"grid.lengths.0": [
        f"6000:4 needs 6,016 tokens of KV cache for one request alone (6000 in + the 16 tokens reserved on "
        f"admission, more than its 4 out), more than the deployment's 5,376 ({source}): the engine would refuse "
        f"every request, even at concurrency 1; use shorter lengths or deploy with a larger KV cache"]}
    assert BenchmarkSweep.objects.count() == 1

    # A report kept already is left as it is by the next start.
    assert engine_limits_backfill(Deployment.objects.get(pk=deployment.pk)) is False
    assert Deployment.objects.get(pk=deployment.pk).engine_limits == limits


def test_a_report_that_read_nothing_is_replaced_only_by_one_that_reads_something(seed_sim, operator):
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    failed = deployment_limits_read(deployment)
    Deployment.objects.filter(pk=deployment.pk).update(engine_limits=failed)
    # Still nothing to read: the older record stays.
    assert engine_limits_backfill(deployment) is False
    assert Deployment.objects.get(pk=deployment.pk).engine_limits == failed

    base = seed_sim()
    deployment.processes.update(health_url=f"{base}/health")
    assert engine_limits_backfill(deployment) is True
    stored = Deployment.objects.get(pk=deployment.pk).engine_limits
    assert stored["error"] is None and stored["servers"]["single0"]["max_total_num_tokens"] == 5376
    assert deployment.engine_limits == stored


def test_sglang_without_context_length_gives_it_from_v1_models(seed_sim, operator):
    base = seed_sim("--context-length-unset")
    deployment = sim_deployment_create(base_url=base)
    assert engine_limits_backfill(deployment) is True
    limits = Deployment.objects.get(pk=deployment.pk).engine_limits
    assert limits["servers"] == {"single0": {
        "base_url": base, "read_from": [f"{base}/get_server_info", f"{base}/v1/models"],
        "max_total_num_tokens": 5376, "context_length": 65536, "max_running_requests": 32,
        "chunked_prefill_size": 1024, "admission_reserve_tokens": 16, "error": None}}
    with pytest.raises(InvalidInput) as exc:
        sweep_create(deployment=Deployment.objects.get(pk=deployment.pk), user=operator,
                     grid={"concurrency": [1], "lengths": ["1000:65000"], "requests": 1})
    when = _when(limits["read_at"])
    assert exc.value.errors == {"grid.lengths.0": [
        f"1000:65000 needs 66,000 tokens of context (1000 in + 65000 out), more than the deployment's 65,536 "
        f"(reported by the single server's /v1/models at {when}: max_model_len 65536): the engine would refuse "
        f"every request; use shorter lengths or deploy with a larger context",
        f"1000:65000 needs 66,000 tokens of KV cache for one request alone (1000 in + 65000 out), more than the "
        f"deployment's 5,376 (reported by the single server's /get_server_info at {when}: max_total_num_tokens "
        f"5376): the engine would refuse every request, even at concurrency 1; use shorter lengths or deploy with "
        f"a larger KV cache"]}
