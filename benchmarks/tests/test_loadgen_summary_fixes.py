"""Run-summary checks against real servers (a ``sim`` process and a ``llama_cpp.server`` with a tiny
generated model): chat prompts of the requested length and the ``input_length_mismatch`` check,
error-adjusted +inf kept distinguishable in stored JSON, the TPOT SLO rule for one-token outputs,
``itl_coalesced`` for events that came in one network read, and the open-loop rate against its
target (``rate_off_target``)."""
from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.utils import timezone

from benchmarks.choices import SweepStatus
from benchmarks.loadgen import Api, LoadConfig, RequestSpec, Slo, loadgen_run, random_dataset, run_summary
from benchmarks.loadgen.metrics import RATE_TARGET_SIGMAS
from benchmarks.services import sweep_create, sweep_execute
from benchmarks.tests.sweep_support import sim_deployment_create, sim_start
from controlplane.jsonsafe import json_safe

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def llama_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a real ``llama_cpp.server`` serving a tiny generated GGUF model."""
    from deployments.engines.tiny_gguf import tiny_gguf_write
    from deployments.tests.test_agent_support import free_ports
    from deployments.tests.test_llamacpp_engine import Server, server_argv

    tmp = tmp_path_factory.mktemp("llama")
    (port,) = free_ports(1)
    srv = Server(server_argv(tiny_gguf_write(tmp / "tiny.gguf"), port), tmp / "server.log", f"http://127.0.0.1:{port}")
    srv.wait_ready()
    yield srv.base_url
    srv.stop()


@pytest.fixture
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


def test_it_flags_chat_prompts_longer_than_requested_with_the_figures(sim_url: str) -> None:
    # Words alone: the chat template adds its own tokens (6 on the sim), so 64 words are 70 tokens.
    specs = random_dataset(num=4, input_len=64, output_len=4, token_ids=False, chat=True, seed=1)
    s = run_summary(loadgen_run(config=LoadConfig(base_url=sim_url, api=Api.CHAT, model="sim-model", concurrency=2),
                                specs=specs))
    check = s["input_length_check"]
    assert (check["requested_mean"], check["actual_mean"], check["difference"]) == (64.0, 70.0, 6.0)
    assert check["tolerance"] == pytest.approx(1.28) and check["mismatch"] is True
    assert s["flags"]["input_length_mismatch"] is True


@pytest.mark.django_db(transaction=True)
def test_a_chat_sweep_sends_prompts_of_exactly_the_requested_length(sim_url: str, operator, _var_dir) -> None:
    deployment = sim_deployment_create(base_url=sim_url, recipe_name="chat")
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [2], "lengths": [[64, 32], [128, 8]], "requests": 4,
                               "api": "openai-chat"})
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
    for run in sweep.runs.order_by("ordinal"):
        s = run.summary
        assert s["input_tokens_actual_mean"] == run.input_len, s["input_length_check"]
        assert s["flags"]["input_length_mismatch"] is False and "input_length_mismatch" not in run.flags
        cal = s["input_calibration"]
        assert cal["check"] == {"words": run.input_len - 6, "prompt_tokens": run.input_len,
                                "requested": run.input_len}
        assert cal["overhead_tokens"] == pytest.approx(6.0) and cal["tokens_per_word"] == pytest.approx(1.0)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("tokenize", [False, True])
def test_a_chat_sweep_on_a_server_that_streams_no_usage_calibrates_without_streaming(llama_url: str, operator,
                                                                                   _var_dir, monkeypatch,
                                                                                   tokenize: bool) -> None:
    # llama_cpp.server streams chat without usage; its non-streaming answer has usage.prompt_tokens.
    # Without its tokenize endpoint (a path it does not have: 404) the prompts are calibrated; with
    # it they are sized by its tokenizer, the template's tokens measured by one such probe.
    if not tokenize:
        from benchmarks.loadgen import tokenized

        monkeypatch.setattr(tokenized, "TOKENIZE_ENDPOINTS", (("/no/tokenize", "/no/detokenize"),))
    from deployments.choices import ProcessStatus, Role
    from deployments.models import Deployment, Node, Recipe, ServerProcess

    node, _ = Node.objects.get_or_create(name="local", defaults={"hostname": "localhost", "cpu_count": 2,
                                                                 "agent_heartbeat_at": timezone.now()})
    spec = {"served_model_name": "tiny", "roles": {"single": {"cpus": "0-1", "port": int(llama_url.rsplit(":", 1)[1])}}}
    recipe = Recipe.objects.create(name="llama-chat", engine="llamacpp", topology="single", node=node, spec=spec)
    deployment = Deployment.objects.create(recipe=recipe, recipe_version=1, spec_snapshot=spec, node=node,
                                           status="ready", entry_url=llama_url)
    ServerProcess.objects.create(deployment=deployment, role=Role.SINGLE, status=ProcessStatus.READY, argv=["python"],
                                 health_url=f"{llama_url}/v1/models")
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [1], "lengths": [[64, 8]], "requests": 2, "api": "openai-chat"})
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
    s = sweep.runs.get().summary
    # the stream carried no usage: the prompts' tokens come from their recount, every one counted
    assert s["successes"] == 2 and s["input_tokens_source"] == "recount"
    assert s["input_tokens_actual_mean"] == s["input_length_check"]["actual_mean"]
    cal = s["input_calibration"]
    if tokenize:
        assert (cal["method"], cal["prompts"], cal["exact"]) == ("tokenize", 2, 2), cal
        probe = cal["overhead_probe"]
        assert cal["overhead_tokens"] == probe["prompt_tokens"] - probe["content_tokens"] > 0, cal
    else:
        assert "error" not in cal and cal["check"]["requested"] == 64
        assert cal["hit"] is (abs(cal["check"]["prompt_tokens"] - 64) <= cal["tolerance_tokens"])
    # Checked all the same: the run's own prompts counted by the server after the point.
    check = s["input_length_check"]
    assert check["source"] == "recount" and check["requests"] == 2 and check["requested_mean"] == 64.0
    assert s["flags"]["input_length_mismatch"] is check["mismatch"]
    assert s["flags"]["input_length_unchecked"] is False
    if tokenize:
        assert check["actual_mean"] == 64.0 and check["mismatch"] is False


def test_error_adjusted_infinity_stays_distinguishable_from_no_data_in_stored_json(sim_url: str) -> None:
    # The sim refuses a prompt longer than its 8192-token context: those requests fail.
    ok = random_dataset(num=9, input_len=16, output_len=4, seed=1)
    too_long = RequestSpec(prompt=list(range(1000, 1000 + 9000)), input_len=9000, output_len=4)
    cfg = LoadConfig(base_url=sim_url, api=Api.GENERATE, model="sim-model", concurrency=1)
    some = json_safe(run_summary(loadgen_run(config=cfg, specs=[*ok, too_long])))
    assert (some["successes"], some["failures"]) == (9, 1)  # nearest rank: p90 is the 9th, p99 the 10th
    assert some["error_adjusted"]["infinite"] == ["e2e_s.p99", "ttft_s.p99"]
    assert some["error_adjusted"]["ttft_s"]["p99"] is None and some["error_adjusted"]["ttft_s"]["p50"] > 0
    every = run_summary(loadgen_run(config=cfg, specs=[too_long, too_long]))
    assert every["error_adjusted"]["ttft_s"]["p50"] == math.inf
    stored = json_safe(every)
    assert stored["error_adjusted"]["ttft_s"] == {"p50": None, "p90": None, "p99": None}
    assert stored["error_adjusted"]["infinite"] == [f"{m}.p{p}" for m in ("e2e_s", "ttft_s") for p in (50, 90, 99)]
    assert stored["error_adjusted"]["failures"] == 2
    # No data: nulls that nothing marks infinite (the plain view over no success).
    assert stored["ttft_s"]["p50"] is None and "ttft_s.p50" in stored["error_adjusted"]["infinite"]


def test_one_token_outputs_are_counted_as_meeting_a_tpot_slo_and_the_summary_says_so(sim_url: str) -> None:
    specs = random_dataset(num=8, input_len=64, output_len=1, seed=3)
    cfg = LoadConfig(base_url=sim_url, api=Api.GENERATE, model="sim-model", concurrency=2, ignore_eos=True,
                     fixed_output=True)
    s = run_summary(loadgen_run(config=cfg, specs=specs), slo=Slo(tpot_s=0.001))
    assert s["slo_attainment"] == 1.0 and s["tpot_s"]["count"] == 0
    assert s["slo_tpot_not_applicable"] == 8 and s["flags"]["tpot_slo_not_applicable"] is True
    without = run_summary(loadgen_run(config=cfg, specs=specs), slo=Slo(ttft_s=10.0))
    assert without["slo_tpot_not_applicable"] == 0 and without["flags"]["tpot_slo_not_applicable"] is False


def test_it_flags_events_that_came_in_one_network_read(tmp_path: Path) -> None:
    # A real HTTP server writing 16 events per chunk, 40 ms apart (as llama.cpp's server did for
    # 59 of a request's 63 gaps): 15 of every 16 gaps are zero at the client.
    from benchmarks.tests.replay_server import ReplayProcess, sse

    tokens, per_write = 64, 16
    events = [sse({"choices": [{"text": " t", "finish_reason": "length" if i == tokens - 1 else None}]})
              for i in range(tokens)]
    writes = [[0.04 * (w + 1), "".join(events[w * per_write:(w + 1) * per_write])] for w in range(tokens // per_write)]
    writes += [[0.2, sse({"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": tokens}})],
               [0.201, sse("[DONE]")]]
    with ReplayProcess({"routes": {"/v1/completions": [{"writes": writes, "tokens": tokens}]}}, tmp_path) as proc:
        cfg = LoadConfig(base_url=proc.url, api=Api.COMPLETIONS, model="m", concurrency=1)
        s = run_summary(loadgen_run(config=cfg, specs=[RequestSpec(prompt="hi", input_len=-1, output_len=tokens)] * 2))
    assert s["successes"] == 2
    assert s["itl_zero_gap_fraction"] == pytest.approx(60 / 63) and s["flags"]["itl_coalesced"] is True
    assert s["itl_s"]["p50"] == 0.0  # what the flag warns about
    assert s["decode_steps"] is None and s["decode_steps_note"] == (
        "95% of 126 gaps between output events are zero (events that came in one network read): the client did "
        "not see the token cadence")


def test_it_flags_llamacpp_runs_whose_events_came_in_one_read(llama_url: str) -> None:
    # Whether llama_cpp.server's events share a read depends on the host's load (97 % of the gaps on
    # an idle 2-core host, none on a busy one): the flag follows the measured fraction.
    specs = random_dataset(num=2, input_len=64, output_len=64, token_ids=False, seed=4)
    cfg = LoadConfig(base_url=llama_url, api=Api.COMPLETIONS, model="tiny", concurrency=1, ignore_eos=True)
    s = run_summary(loadgen_run(config=cfg, specs=specs))
    assert s["successes"] == 2
    assert s["flags"]["itl_coalesced"] is (s["itl_zero_gap_fraction"] >= 0.10)
    assert (s["decode_steps"] is None) is s["flags"]["itl_coalesced"]


# The sim's modelled times stretched so that one decode step at batch 2 is 60 ms: demo-fast's 6 ms
# is shorter than a busy 2-core host keeps a woken process waiting, so two steps' events would
# often be in the socket when the client reads. From 50 ms on the sim cannot run a late step back
# to back with the next either (it only catches up a lag under _MAX_CATCH_UP_S, 50 ms).
SEPARATE_EVENTS_TIME_SCALE = 10.0


def test_it_does_not_flag_a_sim_run_whose_events_each_came_alone(tmp_path: Path) -> None:
    from deployments.engines.simcore.engine import _MAX_CATCH_UP_S
    from deployments.engines.simcore.profile import profile_load

    decode = profile_load("demo-fast").decode
    assert decode.step_time_s(2, 0) * SEPARATE_EVENTS_TIME_SCALE > _MAX_CATCH_UP_S
    base, proc = sim_start(tmp_path / "sim.log", time_scale=SEPARATE_EVENTS_TIME_SCALE)
    try:
        specs = random_dataset(num=4, input_len=32, output_len=32, seed=4)
        cfg = LoadConfig(base_url=base, api=Api.GENERATE, model="sim-model", concurrency=2, ignore_eos=True)
        s = run_summary(loadgen_run(config=cfg, specs=specs))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert s["itl_zero_gap_fraction"] < 0.10 and s["flags"]["itl_coalesced"] is False
    assert s["decode_steps"]["batch_mean"] == pytest.approx(2.0, abs=0.3)


def test_it_records_the_sending_rate_and_flags_it_only_beyond_poisson_noise(sim_url: str) -> None:
    # Seed 0's schedule of 40 arrivals at 20 req/s realises 16.4 req/s: 1.2 standard deviations of
    # a Poisson schedule of 40 requests (1/sqrt(39) = 16 %), so the rate is recorded, not flagged.
    specs = random_dataset(num=40, input_len=16, output_len=2, seed=5)
    s = run_summary(loadgen_run(config=LoadConfig(base_url=sim_url, api=Api.GENERATE, model="sim-model", rate=20.0),
                                specs=specs))
    check = s["rate_target_check"]
    assert s["achieved_send_rate_req_s"] == pytest.approx(16.4, rel=0.05)
    assert check["target_req_s"] == 20.0 and check["requests"] == 40 and check["sigmas"] < RATE_TARGET_SIGMAS
    assert check["bound"] == pytest.approx(math.exp(3 / math.sqrt(39)) - 1)
    assert s["flags"]["rate_off_target"] is False
    # One slot for 200 req/s: each request must end before the next is sent, about 25 req/s.
    capped = LoadConfig(base_url=sim_url, api=Api.GENERATE, model="sim-model", rate=200.0, concurrency=1)
    s = run_summary(loadgen_run(config=capped, specs=random_dataset(num=30, input_len=16, output_len=8, seed=6)))
    assert s["achieved_send_rate_req_s"] < 100 and s["rate_target_check"]["sigmas"] > RATE_TARGET_SIGMAS
    assert s["flags"]["rate_off_target"] is True


@pytest.mark.django_db
def test_the_run_page_shows_infinite_percentiles_and_the_checks_of_a_real_run(sim_url: str, viewer) -> None:
    from django.test import Client

    from benchmarks.choices import RunStatus
    from benchmarks.models import BenchmarkRun

    ok = random_dataset(num=9, input_len=16, output_len=4, seed=1)
    too_long = RequestSpec(prompt=list(range(1000, 1000 + 9000)), input_len=9000, output_len=4)
    cfg = LoadConfig(base_url=sim_url, api=Api.GENERATE, model="sim-model", concurrency=1)
    summary = json_safe(run_summary(loadgen_run(config=cfg, specs=[*ok, too_long]), slo=Slo(tpot_s=1.0)))
    run = BenchmarkRun.objects.create(status=RunStatus.DONE, concurrency=1, input_len=16, output_len=4,
                                      num_requests=10, summary=summary)
    client = Client()
    client.force_login(viewer)

    html = client.get(f"/benchmarks/runs/{run.pk}/").content.decode()

    assert "Error-adjusted (ms)" in html and "1 failed request counted as ∞" in html
    # p50 and p90 are real times, p99 is the failure's +inf (stored as null, listed as infinite)
    ttft_row = html.split("error-adjusted", 1)[1].split("<td>TTFT</td>", 1)[1].split("</tr>", 1)[0]
    assert ttft_row.count("∞ (failures)") == 1 and ttft_row.rstrip().endswith("∞ (failures)</td>")
    assert "Zero gaps between output events (% of gaps)" in html
    assert "Decode step seen from the client (ms)" in html
    assert "Prompt tokens counted by the server (mean) (tokens)" in html
