"""Text prompts on a real ``llama_cpp.server`` (tiny generated model, 256-token context) sized with
its own tokenizer (``/extras/tokenize``): every prompt the server is sent counts exactly the
requested tokens, by the server's own ``usage.prompt_tokens``, for completions and chat alike, and a
sweep point says so in ``input_calibration`` while its ``input_length_check`` stays the server's
count of the prompts sent."""
from __future__ import annotations

import asyncio

import pytest

from benchmarks.choices import SweepStatus
from benchmarks.loadgen import Api, prompts_token_counts
from benchmarks.loadgen.tokenized import tokenized_text_dataset
from benchmarks.services import sweep_create, sweep_execute
from benchmarks.tests.test_llamacpp_calibration_failures import _llama_deployment
from benchmarks.tests.test_loadgen_summary_fixes import _var_dir, llama_url  # noqa: F401 - fixtures

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.mark.parametrize("api", [Api.COMPLETIONS, Api.CHAT])
@pytest.mark.parametrize("input_len", [16, 64])
def test_every_prompt_is_the_requested_length_by_the_servers_count(llama_url: str, api: Api, input_len: int) -> None:
    specs, ev = asyncio.run(tokenized_text_dataset(base_url=llama_url, api=api, model="tiny", num=12,
                                                   input_len=input_len, output_len=1, seed=7))
    assert specs is not None and ev["method"] == "tokenize" and ev["endpoint"] == "/extras/tokenize", ev
    # Completions add nothing the tokenize endpoint does not count (both add BOS); the chat template
    # adds its role markers.
    assert ev["overhead_tokens"] == (0 if api is Api.COMPLETIONS else ev["overhead_probe"]["overhead_tokens"])
    if api is Api.CHAT:
        assert ev["overhead_tokens"] > 0
    assert (ev["prompts"], ev["exact"], ev["max_miss_tokens"]) == (12, 12, 0), ev
    counts, why = asyncio.run(prompts_token_counts(base_url=llama_url, api=api, model="tiny", specs=specs))
    assert why is None and counts == [input_len] * 12
    # Same arguments, same requests.
    again, _ = asyncio.run(tokenized_text_dataset(base_url=llama_url, api=api, model="tiny", num=12,
                                                  input_len=input_len, output_len=1, seed=7))
    assert [s.prompt for s in again] == [s.prompt for s in specs]


def test_a_server_without_a_tokenize_endpoint_is_left_to_the_calibration(sim_url: str) -> None:
    specs, ev = asyncio.run(tokenized_text_dataset(base_url=sim_url, api=Api.CHAT, model="sim-model", num=2,
                                                   input_len=16, output_len=1))
    assert specs is None and len(ev["tokenize_unavailable"]) == 1 and "404" in ev["tokenize_unavailable"][0], ev


@pytest.mark.django_db(transaction=True)
def test_a_llamacpp_sweep_sends_prompts_of_exactly_the_requested_length(llama_url: str, operator, _var_dir) -> None:
    sweep = sweep_create(deployment=_llama_deployment(llama_url), user=operator,
                         grid={"concurrency": [1, 4], "lengths": [[16, 8], [64, 8]], "requests": 6,
                               "api": "openai-completions"})
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
    for run in sweep.runs.order_by("ordinal"):
        s = run.summary
        cal = s["input_calibration"]
        assert cal["method"] == "tokenize" and cal["overhead_tokens"] == 0, cal
        assert (cal["prompts"], cal["exact"], cal["max_miss_tokens"]) == (6, 6, 0), cal
        # Measured, not assumed: the server counted the prompts it was sent again after the point.
        check = s["input_length_check"]
        assert check["source"] == "recount" and check["requests"] == 6, s
        assert check["actual_mean"] == check["requested_mean"] == run.input_len
        assert s["flags"]["input_length_mismatch"] is False and "input_length_mismatch" not in run.flags
        assert s["flags"]["input_length_unchecked"] is False
