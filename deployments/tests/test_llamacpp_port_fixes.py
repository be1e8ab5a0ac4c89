"""llama.cpp's ``chat_format`` is checked against the chat formats the installed llama-cpp-python
registers. The real server takes any name, starts, answers completions (what readiness probes)
and fails every chat request with "Invalid chat handler" (HTTP 500) for a name it does not
know; validation now refuses such a name with the closest registered ones.

Real parts: llama-cpp-python's registry in a fresh interpreter, and ``python -m llama_cpp.server``
on the generated tiny GGUF model.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from controlplane.errors import InvalidInput
from deployments.engines.llamacpp import CHAT_FORMATS, WORKER_FLAGS
from deployments.engines.tiny_gguf import tiny_gguf_write
from deployments.examples import local_node_facts_example
from deployments.recipes import recipe_validate
from deployments.tests.test_llamacpp_engine import REQUEST_TIMEOUT_S, Server, free_port

FIELD = "spec.roles.single.flags.chat_format"


def _spec(chat_format) -> dict:
    return {
        "model": {"path": "/models/tiny.gguf"},
        "roles": {"single": {"cpus": "0", "port": 31090, "flags": {"chat_format": chat_format}}},
    }


def _errors(chat_format) -> dict[str, list[str]]:
    with pytest.raises(InvalidInput) as raised:
        recipe_validate(engine="llamacpp", topology="single", node=local_node_facts_example(), spec=_spec(chat_format))
    return raised.value.errors


@pytest.fixture
def model_roots(settings):
    settings.CEILING_MODEL_ROOTS = ["/models"]


def test_the_list_is_the_registry_of_the_installed_llama_cpp_python():
    code = ("import json, llama_cpp, llama_cpp.llama_chat_format as f; "
            "print(json.dumps([llama_cpp.__version__, "
            "sorted(f.LlamaChatCompletionHandlerRegistry()._chat_handlers)]))")
    version, names = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                               check=True, timeout=60).stdout)
    assert CHAT_FORMATS == tuple(names)
    assert {"chatml", "llama-2", "llama-3", "gemma"} <= set(CHAT_FORMATS)
    assert WORKER_FLAGS["chat_format"].choices == CHAT_FORMATS
    assert version


def test_it_refuses_an_unknown_chat_format_listing_the_registered_ones(model_roots):
    import llama_cpp

    assert _errors("bogus-format") == {FIELD: [
        f"--chat_format 'bogus-format' is not a chat format llama-cpp-python {llama_cpp.__version__} registers; "
        f"choose one of {', '.join(CHAT_FORMATS)}"]}


def test_it_suggests_the_closest_registered_chat_formats(model_roots):
    import llama_cpp

    assert _errors("chatml2") == {FIELD: [
        f"--chat_format 'chatml2' is not a chat format llama-cpp-python {llama_cpp.__version__} registers; "
        "did you mean 'chatml' or 'chatglm3'? (see docs/recipes.md, section 'llamacpp flags')"]}
    assert _errors("Llama-3")[FIELD][0].startswith("--chat_format 'Llama-3' is not a chat format")
    assert "did you mean 'llama-3'" in _errors("Llama-3")[FIELD][0]


def test_it_keeps_the_type_errors_of_non_string_values(model_roots):
    assert _errors(7) == {FIELD: ["--chat_format must be a string, got 7"]}


def test_it_accepts_every_registered_chat_format(model_roots):
    for name in CHAT_FORMATS:
        out = recipe_validate(engine="llamacpp", topology="single", node=local_node_facts_example(), spec=_spec(name))
        assert out["roles"]["single"]["flags"]["chat_format"] == name


def _serve(tmp_path: Path, chat_format: str) -> Server:
    model = tmp_path / "tiny-random.gguf"
    if not model.exists():
        tiny_gguf_write(model)
    port = free_port()
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "tiny",
            "--host", "127.0.0.1", "--port", str(port), "--n_threads", "1", "--n_ctx", "256",
            "--chat_format", chat_format]
    return Server(argv, tmp_path / f"{chat_format}.log", f"http://127.0.0.1:{port}")


def _completion(srv: Server) -> httpx.Response:
    return httpx.post(srv.base_url + "/v1/completions", timeout=REQUEST_TIMEOUT_S,
                      json={"model": "tiny", "prompt": "Hello", "max_tokens": 1, "temperature": 0})


def _chat(srv: Server) -> httpx.Response:
    return httpx.post(srv.base_url + "/v1/chat/completions", timeout=REQUEST_TIMEOUT_S,
                      json={"model": "tiny", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 1,
                            "temperature": 0})


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_real_server_fails_chat_for_a_name_validation_refuses_and_serves_it_for_a_registered_one(tmp_path):
    # The failure validation now prevents: readiness (a completion) passes, every chat fails.
    bogus = _serve(tmp_path, "bogus-format")
    try:
        bogus.wait_ready()
        assert _completion(bogus).status_code == 200
        chat = _chat(bogus)
        assert chat.status_code == 500
        assert "Invalid chat handler" in (chat.text + bogus.log.read_text())
    finally:
        bogus.stop()

    good = _serve(tmp_path, "chatml")
    try:
        good.wait_ready()
        assert _completion(good).status_code == 200
        chat = _chat(good)
        assert chat.status_code == 200, chat.text
        assert chat.json()["usage"]["completion_tokens"] == 1
    finally:
        good.stop()
