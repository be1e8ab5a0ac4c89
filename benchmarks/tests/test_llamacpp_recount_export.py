"""The CSV export of llama.cpp runs, whose stream reports no prompt tokens, against a real
``llama_cpp.server``: the prompt length measured by the post-run recount fills the input-token
figures when it covered every successful request, and is exported apart when it was a sample."""
from __future__ import annotations

import csv
import io

import pytest

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkRun
from benchmarks.services import sweep_create, sweep_execute
from benchmarks.services import sweeps as sweeps_module
from benchmarks.tests.test_llamacpp_calibration_failures import _llama_deployment
from benchmarks.tests.test_loadgen_summary_fixes import _var_dir, llama_url  # noqa: F401 - fixtures

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]


def _csv_rows(api, sweep_id: int) -> list[dict[str, str]]:
    response = api.get(f"/api/sweeps/{sweep_id}/export/?format=csv")
    assert response.status_code == 200, response.content
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def test_a_recount_of_every_prompt_fills_the_input_tokens_and_a_sample_is_exported_apart(
        llama_url: str, operator, operator_api, _var_dir, monkeypatch) -> None:
    deployment = _llama_deployment(llama_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [2], "lengths": ["64:8"], "requests": 4, "api": "openai-completions"})
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
    run = BenchmarkRun.objects.get(sweep=sweep)
    s = run.summary
    check = s["input_length_check"]
    assert check["source"] == "recount" and s["input_length_recount"]["prompts"] == s["successes"] == 4, s
    assert s["input_tokens_source"] == "recount" and s["input_tokens_actual_mean"] == check["actual_mean"]
    assert s["input_tokens"] == round(check["actual_mean"] * 4)
    duration = s["successes"] / s["request_throughput_req_s"]
    assert s["total_token_throughput_tok_s"] == pytest.approx((s["output_tokens"] + s["input_tokens"]) / duration)
    [row] = _csv_rows(operator_api, sweep.pk)
    assert float(row["input_tokens_mean"]) == pytest.approx(check["actual_mean"])
    assert float(row["total_token_throughput_tok_s"]) == pytest.approx(s["total_token_throughput_tok_s"])
    assert row["input_tokens_source"] == "recount" and row["input_tokens_recount_sample_mean"] == ""

    # A recount that counts only some of the successes' prompts: a sample, not the run's total.
    monkeypatch.setattr(sweeps_module, "PROMPT_RECOUNT_MAX", 2)
    sampled = sweep_create(deployment=deployment, user=operator,
                           grid={"concurrency": [2], "lengths": ["64:8"], "requests": 4, "api": "openai-completions"})
    assert sweep_execute(sweep_id=sampled.pk) == SweepStatus.DONE
    s = BenchmarkRun.objects.get(sweep=sampled).summary
    assert s["input_length_recount"]["prompts"] == 2 and s["successes"] == 4, s
    assert s["input_tokens_actual_mean"] is None and s["total_token_throughput_tok_s"] is None
    assert s["input_tokens_source"] is None
    assert s["input_tokens_recount_sample_mean"] == s["input_length_check"]["actual_mean"]
    [row] = _csv_rows(operator_api, sampled.pk)
    assert row["input_tokens_mean"] == row["total_token_throughput_tok_s"] == row["input_tokens_source"] == ""
    assert float(row["input_tokens_recount_sample_mean"]) == pytest.approx(s["input_length_check"]["actual_mean"])
