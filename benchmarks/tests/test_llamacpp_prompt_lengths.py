"""Text prompts on a real ``llama_cpp.server`` (tiny generated model, 256-token context), whose stream
carries no usage: the calibration (what a server without a tokenize endpoint gets) checks the
requested length until a probe lands within the run's tolerance (or says it did not), and every
run's prompt length is checked, against the server's own count of the prompts it was sent, so
``input_length_check``, ``input_length_mismatch`` and ``input_length_unchecked`` say what happened
(the sweep's prompts sized with the server's tokenizer, which llama.cpp offers)."""
from __future__ import annotations

import asyncio

import pytest

from benchmarks.choices import SweepStatus
from benchmarks.loadgen import Api, dataset_calibrate_text_at, prompts_token_counts, random_dataset
from benchmarks.loadgen.calibrate import CALIBRATION_CHECKS
from benchmarks.services import sweep_create, sweep_execute
from benchmarks.tests.test_llamacpp_calibration_failures import _llama_deployment
from benchmarks.tests.test_loadgen_summary_fixes import _var_dir, llama_url  # noqa: F401 - fixtures

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.mark.parametrize("input_len", [16, 64, 200])
def test_calibration_checks_the_requested_length_until_a_probe_lands_within_tolerance(llama_url: str,
                                                                                     input_len: int) -> None:
    cal, ev = asyncio.run(dataset_calibrate_text_at(base_url=llama_url, api=Api.COMPLETIONS, model="tiny",
                                                    input_len=input_len, seed=3))
    assert ev["tolerance_tokens"] == max(0.02 * input_len, 1.0)
    assert 1 <= len(ev["checks"]) <= CALIBRATION_CHECKS
    assert ev["check"] == {"words": ev["checks"][-1][0], "prompt_tokens": ev["checks"][-1][1],
                           "requested": input_len}
    misses = [t for _, t in ev["checks"][:-1]]
    assert all(abs(t - input_len) > ev["tolerance_tokens"] for t in misses), ev  # it stops at the first hit
    last = ev["checks"][-1][1]
    assert ev["hit"] is (abs(last - input_len) <= ev["tolerance_tokens"]), ev
    assert ev["hit"] or len(ev["checks"]) == CALIBRATION_CHECKS, ev
    # The words it gives are what the server counts: a prompt built from it, counted by the server.
    specs = random_dataset(num=8, input_len=input_len, output_len=1, token_ids=False, calibration=cal, seed=9)
    counts, why = asyncio.run(prompts_token_counts(base_url=llama_url, api=Api.COMPLETIONS, model="tiny",
                                                   specs=specs))
    assert why is None and len(counts) == 8
    # Near the request, not on it: each prompt's random words tokenize differently (26 words were 46
    # to 62 tokens here, the check probe's 64), which is why the run counts its own prompts again.
    assert abs(sum(counts) / 8 - input_len) <= max(0.25 * input_len, 4), (counts, ev)


@pytest.mark.django_db(transaction=True)
def test_every_llamacpp_run_checks_its_prompts_against_the_servers_count(llama_url: str, operator,
                                                                        _var_dir) -> None:
    sweep = sweep_create(deployment=_llama_deployment(llama_url), user=operator,
                         grid={"concurrency": [1], "lengths": [[16, 8], [200, 8]], "requests": 3,
                               "api": "openai-completions"})
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
    for run in sweep.runs.order_by("ordinal"):
        s = run.summary
        assert s["successes"] == 3 and s["input_tokens_source"] == "recount"  # the stream carried no usage
        check = s["input_length_check"]
        assert s["input_tokens_actual_mean"] == check["actual_mean"]  # every success's prompt was counted
        assert check is not None and check["source"] == "recount" and check["requests"] == 3, s
        assert check["requested_mean"] == run.input_len
        assert s["input_length_recount"] == {"prompts": 3, "successes": 3, "error": None}
        assert check["mismatch"] is (abs(check["actual_mean"] - run.input_len) > check["tolerance"])
        assert s["flags"]["input_length_mismatch"] is check["mismatch"]
        assert ("input_length_mismatch" in run.flags) is check["mismatch"]
        assert s["flags"]["input_length_unchecked"] is False and "input_length_unchecked" not in run.flags
        # Sized with the server's tokenizer (/extras/tokenize): the recount finds them exact.
        cal = s["input_calibration"]
        assert (cal["method"], cal["prompts"], cal["exact"]) == ("tokenize", 3, 3), cal
        assert check["actual_mean"] == run.input_len and check["mismatch"] is False
