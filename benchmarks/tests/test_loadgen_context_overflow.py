"""A prompt longer than the engine's context, against a real ``llama_cpp.server`` (the tiny generated
model, 2048-token context): the server answers a streaming request with HTTP 200 and an empty
stream, then closes the connection. The load generator records the request as failed because the
stream ended with no output tokens, in its per-request errors and the run's error summary, and the
requests after it, on a fresh connection, are answered as if it never happened."""
from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from benchmarks.loadgen import Api, LoadConfig, loadgen_run, random_dataset, run_summary
from benchmarks.loadgen.client import NO_OUTPUT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

N_CTX = 2048
EMPTY_STREAM = f"{NO_OUTPUT}: HTTP 200 with an empty body"


@pytest.fixture(scope="module")
def llama_2048(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a real ``llama_cpp.server`` with a 2048-token context."""
    from deployments.engines.tiny_gguf import tiny_gguf_write
    from deployments.tests.test_agent_support import free_ports
    from deployments.tests.test_llamacpp_engine import Server, server_argv

    tmp = tmp_path_factory.mktemp("llama-2048")
    (port,) = free_ports(1)
    argv = server_argv(tiny_gguf_write(tmp / "tiny-random.gguf"), port)
    argv[argv.index("--n_ctx") + 1] = str(N_CTX)
    srv = Server(argv, tmp / "server.log", f"http://127.0.0.1:{port}")
    srv.wait_ready()
    yield srv.base_url
    srv.stop()


def _interleaved(*, chat: bool) -> list:
    # Text prompts: one word is at least one token, so 2100 words do not fit in 2048 tokens.
    long = random_dataset(num=3, input_len=2100, output_len=4, token_ids=False, chat=chat, seed=1)
    short = random_dataset(num=3, input_len=16, output_len=4, token_ids=False, chat=chat, seed=2)
    return [spec for pair in zip(long, short) for spec in pair]


@pytest.mark.parametrize("api", [Api.COMPLETIONS, Api.CHAT], ids=["completions", "chat"])
def test_a_prompt_longer_than_the_context_fails_with_what_the_stream_said(llama_2048: str, api: Api) -> None:
    chat = api is Api.CHAT
    specs = _interleaved(chat=chat)
    # What the engine itself does: 200 and an empty event stream when streaming; its reason comes
    # only without streaming, as a 400.
    path = "/v1/chat/completions" if chat else "/v1/completions"
    prompt = {"messages": specs[0].messages} if chat else {"prompt": specs[0].prompt}
    assert all(prompt.values())
    streamed = httpx.post(llama_2048 + path, json={**prompt, "max_tokens": 4, "stream": True}, timeout=60)
    assert (streamed.status_code, streamed.content) == (200, b"")
    whole = httpx.post(llama_2048 + path, json={**prompt, "max_tokens": 4}, timeout=60)
    assert whole.status_code == 400 and whole.json()["error"]["code"] == "context_length_exceeded"

    result = loadgen_run(config=LoadConfig(base_url=llama_2048, api=api, model="tiny", concurrency=1), specs=specs)
    # Every long prompt fails with the stream's own account; every short one after it succeeds (the
    # connection the server closed is not reused, so no request inherits its failure).
    assert result.records.errors == {0: EMPTY_STREAM, 2: EMPTY_STREAM, 4: EMPTY_STREAM}
    summary = run_summary(result)
    assert (summary["successes"], summary["failures"]) == (3, 3)
    assert summary["errors"] == {EMPTY_STREAM: 3}
