"""A real ``llama_cpp.server`` (tiny generated model, 256-token context): text prompts calibrated
through a non-streaming probe (its stream carries no usage) where the server's tokenize endpoint is
not found (its path moved to one the server does not have: the calibration a server without one
gets), a point whose every request failed
flagged with unknown throughputs, an uncalibrated point flagged ``input_length_unchecked``, and a
sweep longer than the recipe's context refused."""
from __future__ import annotations

import pytest
from django.utils import timezone

from benchmarks.choices import SweepStatus
from benchmarks.services import run_metrics, sweep_create, sweep_execute
from controlplane.errors import InvalidInput

from benchmarks.tests.test_loadgen_summary_fixes import _var_dir, llama_url  # noqa: F401 - fixtures

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _llama_deployment(url: str, flags: dict | None = None):
    from deployments.choices import ProcessStatus, Role
    from deployments.models import Deployment, Node, Recipe, ServerProcess

    node, _ = Node.objects.get_or_create(name="local", defaults={"hostname": "localhost", "cpu_count": 2,
                                                                 "agent_heartbeat_at": timezone.now()})
    role = {"cpus": "0-1", "port": int(url.rsplit(":", 1)[1])}
    if flags:
        role["flags"] = flags
    spec = {"served_model_name": "tiny", "roles": {"single": role}}
    recipe = Recipe.objects.create(name="llama", engine="llamacpp", topology="single", node=node, spec=spec)
    deployment = Deployment.objects.create(recipe=recipe, recipe_version=1, spec_snapshot=spec, node=node,
                                           status="ready", entry_url=url)
    ServerProcess.objects.create(deployment=deployment, role=Role.SINGLE, status=ProcessStatus.READY, argv=["python"],
                                 health_url=f"{url}/v1/models")
    return deployment


def _without_tokenize(monkeypatch: pytest.MonkeyPatch) -> None:
    """The load generator asks for a tokenize endpoint the server does not have (HTTP 404), so text
    prompts take the calibration, as on a server without one."""
    from benchmarks.loadgen import tokenized

    monkeypatch.setattr(tokenized, "TOKENIZE_ENDPOINTS", (("/no/tokenize", "/no/detokenize"),))


@pytest.fixture
def no_tokenize(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_tokenize(monkeypatch)


@pytest.mark.django_db(transaction=True)
def test_completions_prompts_on_llamacpp_are_calibrated_to_the_requested_length(llama_url: str, operator,
                                                                                 _var_dir, no_tokenize) -> None:
    sweep = sweep_create(deployment=_llama_deployment(llama_url), user=operator,
                         grid={"concurrency": [1], "lengths": [[64, 8]], "requests": 2,
                               "api": "openai-completions"})
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
    run = sweep.runs.get()
    s = run.summary
    cal = s["input_calibration"]
    assert "error" not in cal and "tokenize_error" not in cal and "method" not in cal, cal
    # Random words are about 2.2 tokens each on this tokenizer: uncalibrated, 64 words were ~140 tokens.
    assert 1.5 < cal["tokens_per_word"] < 3.5
    assert [w for w, _ in cal["probes"]] == [8, 32] and all(t > w for w, t in cal["probes"])
    check = cal["check"]
    assert check["requested"] == 64 and cal["hit"] is (abs(check["prompt_tokens"] - 64) <= cal["tolerance_tokens"])
    assert s["successes"] == 2 and s["flags"]["input_length_unchecked"] is False
    assert s["input_length_check"]["source"] == "recount" and s["input_length_check"]["requests"] == 2
    assert "input_length_unchecked" not in run.flags and "no_successful_requests" not in run.flags


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("tokenize", [False, True])
def test_a_point_longer_than_the_context_is_flagged_failed_unchecked_and_unknown(llama_url: str, operator,
                                                                                 operator_api, _var_dir,
                                                                                 monkeypatch, tokenize: bool) -> None:
    if not tokenize:
        _without_tokenize(monkeypatch)
    # No n_ctx in the recipe: nothing to refuse at create, and every request exceeds the 256 tokens.
    sweep = sweep_create(deployment=_llama_deployment(llama_url), user=operator,
                         grid={"concurrency": [1], "lengths": [[600, 8]], "requests": 2,
                               "api": "openai-completions"})
    sweep_execute(sweep_id=sweep.pk)
    run = sweep.runs.get()
    s = run.summary
    assert (s["successes"], s["failures"]) == (0, 2)
    if tokenize:
        # The tokenizer takes what the context does not: the prompts are sized, and every request fails.
        cal = s["input_calibration"]
        assert (cal["method"], cal["prompts"], cal["exact"]) == ("tokenize", 2, 2), cal
    else:
        assert s["input_calibration"] == {"error": "prompts not calibrated: calibration probe of 300 words gave "
                                                   "no prompt_tokens: the stream ended with no output tokens: "
                                                   "HTTP 200 with an empty body"}
    assert {"no_successful_requests", "input_length_unchecked"} <= set(run.flags)
    # llama_cpp.server answers 200 and an empty stream, then closes the connection: the reason says
    # so for every request, none of which is sent on the connection the server closed.
    assert s["errors"] == {"the stream ended with no output tokens: HTTP 200 with an empty body": 2}
    for key in ("output_throughput_tok_s", "request_throughput_req_s", "total_token_throughput_tok_s"):
        assert s[key] is None
    body = operator_api.get(f"/api/runs/{run.pk}/").json()
    assert body["metrics"]["output_throughput_tok_s"] is None
    assert body["metrics"]["request_throughput_req_s"] is None
    assert body["metrics"]["total_token_throughput_tok_s"] is None
    assert {"no_successful_requests", "input_length_unchecked"} <= set(body["flags"])
    from django.test import Client

    web = Client()
    web.force_login(operator)
    csv_text = web.get(f"/benchmarks/runs/{run.pk}/export.csv").content.decode()
    header, row = csv_text.splitlines()[:2]
    cells = dict(zip(header.split(","), row.split(",")))
    assert cells["output_throughput_tok_s"] == cells["total_token_throughput_tok_s"] == ""
    assert cells["request_throughput_req_s"] == ""
    page = web.get(f"/benchmarks/runs/{run.pk}/").content.decode()
    assert "the requested input length was not checked" in page and "no request of this run succeeded" in page
    index = web.get("/benchmarks/").content.decode()
    assert "0 of 2 requests succeeded" in index
    assert "0 of 2 requests succeeded" in web.get(f"/benchmarks/sweeps/{sweep.pk}/").content.decode()
    assert run_metrics(run=run)["total_token_throughput_tok_s"] is None


@pytest.mark.django_db(transaction=True)
def test_a_sweep_longer_than_the_recipes_context_is_refused(llama_url: str, operator) -> None:
    deployment = _llama_deployment(llama_url, flags={"n_ctx": 256})
    with pytest.raises(InvalidInput) as err:
        sweep_create(deployment=deployment, user=operator,
                     grid={"concurrency": [1], "lengths": [[64, 8], [250, 8]], "requests": 2})
    assert err.value.errors == {"grid.lengths.1": [
        "250:8 needs 258 tokens of context (250 in + 8 out), more than the deployment's 256 "
        "(roles.single.flags.n_ctx): the engine would refuse every request; use shorter lengths or deploy "
        "with a larger context"]}
