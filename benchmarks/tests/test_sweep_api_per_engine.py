"""Which load-generator API each engine serves (:data:`benchmarks.sweeps.ENGINE_APIS`), checked
against real servers: a ``sim`` process and a ``llama_cpp.server`` with a tiny generated model
answer every API declared for them and 404 the others, so a sweep refused at creation for its
``api`` is one whose every request would have failed ``HTTP 404``."""
from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from benchmarks.loadgen import Api
from benchmarks.loadgen.protocol import request_body, request_path
from benchmarks.sweeps import ENGINE_APIS, grid_validate
from controlplane.errors import InvalidInput

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _status(base_url: str, api: Api, model: str) -> int:
    """HTTP status of one streamed one-token request of ``api`` (the load generator's own body)."""
    body = request_body(api=api, model=model, prompt="Hello", messages=None, max_tokens=1, ignore_eos=False)
    response = httpx.post(base_url + request_path(api), content=body,
                          headers={"Content-Type": "application/json"}, timeout=120)
    return response.status_code


def test_the_sim_serves_every_api_declared_for_it(sim_url: str) -> None:
    assert {api.value: _status(sim_url, api, "sim-model") for api in Api} == {
        api.value: 200 if api.value in ENGINE_APIS["sim"] else 404 for api in Api}
    assert set(ENGINE_APIS["sim"]) == {a.value for a in Api}


def test_llamacpp_serves_the_openai_apis_and_not_sglang_generate(tmp_path: Path) -> None:
    from deployments.engines.tiny_gguf import tiny_gguf_write
    from deployments.tests.test_agent_support import free_ports
    from deployments.tests.test_llamacpp_engine import Server, server_argv

    (port,) = free_ports(1)
    srv = Server(server_argv(tiny_gguf_write(tmp_path / "tiny.gguf"), port), tmp_path / "server.log",
                 f"http://127.0.0.1:{port}")
    try:
        srv.wait_ready()
        answers = {api.value: _status(srv.base_url, api, "tiny") for api in Api}
    finally:
        srv.stop()
    assert answers == {"openai-completions": 200, "openai-chat": 200, "sglang-generate": 404}
    assert ENGINE_APIS["llamacpp"] == ("openai-completions", "openai-chat")
    with pytest.raises(InvalidInput) as refused:
        grid_validate({"concurrency": [1], "lengths": "64:16", "requests": 4, "api": "sglang-generate"},
                      engine="llamacpp")
    assert refused.value.errors == {"grid.api": [
        "sglang-generate is not served by this deployment's engine (llamacpp); it serves openai-completions, "
        "openai-chat"]}
