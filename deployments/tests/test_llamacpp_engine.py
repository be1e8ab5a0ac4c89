"""The llama.cpp engine for real: the generated GGUF model, llama.cpp's own loader, and
``python -m llama_cpp.server`` as a child process on loopback (OpenAI completions and chat,
non-streamed and SSE), including the exact argv the ``local-llamacpp`` example renders to.

Facts these tests pin down about llama-cpp-python's server (0.3.x), which readiness and the load
generator rely on:

* there is no ``/health`` route (404); ``/v1/models`` answers once the model is loaded;
* with ``temperature: 0`` the generated model never emits EOS (see ``tiny_gguf``), so
  ``max_tokens: N`` gives exactly ``N`` completion tokens and ``finish_reason: "length"``;
* streamed responses send one SSE chunk per generated token, then a chunk carrying
  ``finish_reason`` and ``data: [DONE]``; ``stream_options.include_usage`` is accepted but
  ignored: no chunk carries ``usage``, so streamed token counts come from counting chunks.

Every server runs in its own session, every wait is bounded, and every process is killed at
teardown.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import gguf
import httpx
import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from deployments.engines.tiny_gguf import (
    CHAT_TEMPLATE,
    PARAMS_KEY,
    SPECIAL_TOKENS,
    TinyGgufParams,
    tiny_gguf_default_path,
    tiny_gguf_metadata,
    tiny_gguf_params,
    tiny_gguf_write,
)

STARTUP_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 30.0


def field(reader: gguf.GGUFReader, key: str):
    return reader.fields[key].contents()


# --- the generator -------------------------------------------------------------------------------


def test_it_writes_a_llama_gguf_with_every_key_llama_cpp_reads(tmp_path: Path) -> None:
    started = time.monotonic()
    path = tiny_gguf_write(tmp_path / "m.gguf")
    elapsed = time.monotonic() - started

    assert path == tmp_path / "m.gguf"
    assert elapsed < 2.0
    reader = gguf.GGUFReader(str(path))
    assert field(reader, "general.architecture") == "llama"
    assert field(reader, "general.file_type") == 1
    assert field(reader, "llama.context_length") == 2048
    assert field(reader, "llama.embedding_length") == 128
    assert field(reader, "llama.block_count") == 2
    assert field(reader, "llama.feed_forward_length") == 256
    assert field(reader, "llama.attention.head_count") == 4
    assert field(reader, "llama.attention.head_count_kv") == 2
    assert field(reader, "llama.attention.layer_norm_rms_epsilon") == pytest.approx(1e-5)
    assert field(reader, "llama.rope.dimension_count") == 32
    assert field(reader, "llama.vocab_size") == 512
    assert field(reader, "tokenizer.ggml.model") == "gpt2"
    assert field(reader, "tokenizer.ggml.pre") == "gpt-2"
    assert field(reader, "tokenizer.chat_template") == CHAT_TEMPLATE

    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    merges = field(reader, "tokenizer.ggml.merges")
    assert len(tokens) == len(types) == 512
    assert len(set(tokens)) == 512
    assert tokens[509:] == list(SPECIAL_TOKENS)
    assert types[509:] == [3, 3, 3] and set(types[:509]) == {1}
    assert field(reader, "tokenizer.ggml.bos_token_id") == 509
    assert field(reader, "tokenizer.ggml.eos_token_id") == 509
    # Every merge joins two known tokens into a known token.
    known = set(tokens)
    assert len(merges) >= 512 - 256 - 3
    for merge in merges:
        left, right = merge.split(" ")
        assert left in known and right in known and left + right in known

    shapes = {t.name: (t.tensor_type.name, [int(d) for d in t.shape]) for t in reader.tensors}
    assert len(shapes) == 3 + 9 * 2
    assert shapes["token_embd.weight"] == ("F16", [128, 512])
    assert shapes["output.weight"] == ("F16", [128, 512])
    assert shapes["output_norm.weight"] == ("F32", [128])
    assert shapes["blk.1.attn_q.weight"] == ("F16", [128, 128])
    assert shapes["blk.1.attn_k.weight"] == ("F16", [128, 64])
    assert shapes["blk.1.attn_v.weight"] == ("F16", [128, 64])
    assert shapes["blk.1.ffn_gate.weight"] == ("F16", [128, 256])
    assert shapes["blk.1.ffn_down.weight"] == ("F16", [256, 128])
    # Output rows are zero exactly for what greedy decoding must never pick: control tokens and
    # byte tokens (ids = byte values) other than printable ASCII and newline.
    output = next(t for t in reader.tensors if t.name == "output.weight").data
    silent = {i for i in range(512) if not np.any(output[i])}
    assert silent == {*range(0, 10), *range(11, 32), *range(127, 256), 509, 510, 511}
    assert path.stat().st_size == pytest.approx(TinyGgufParams().n_params * 2, rel=0.05)


def test_it_is_byte_identical_for_a_seed_and_differs_across_seeds(tmp_path: Path) -> None:
    a = tiny_gguf_write(tmp_path / "a.gguf", seed=7).read_bytes()
    b = tiny_gguf_write(tmp_path / "b.gguf", seed=7).read_bytes()
    c = tiny_gguf_write(tmp_path / "c.gguf", seed=8).read_bytes()

    assert a == b
    assert a != c
    assert len(a) == len(c)


def test_it_keeps_a_valid_file_and_rewrites_it_with_force(tmp_path: Path) -> None:
    path = tiny_gguf_write(tmp_path / "m.gguf")
    inode = path.stat().st_ino

    tiny_gguf_write(path)
    assert path.stat().st_ino == inode

    tiny_gguf_write(path, force=True)
    assert path.stat().st_ino != inode
    assert tiny_gguf_params(path) == TinyGgufParams()
    assert [p.name for p in tmp_path.iterdir()] == ["m.gguf"]


def test_it_rewrites_a_file_made_with_other_parameters(tmp_path: Path) -> None:
    path = tiny_gguf_write(tmp_path / "m.gguf", n_layer=1)
    assert tiny_gguf_params(path).n_layer == 1

    tiny_gguf_write(path)

    assert tiny_gguf_params(path) == TinyGgufParams()


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_it_replaces_a_damaged_file(tmp_path: Path, damage: str) -> None:
    path = tiny_gguf_write(tmp_path / "m.gguf")
    good = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "garbage":
        path.write_bytes(b"not a gguf file" * 100)
    else:
        path.write_bytes(b"")
    assert tiny_gguf_params(path) is None

    tiny_gguf_write(path)

    assert path.read_bytes() == good


def test_it_rejects_parameters_that_cannot_form_a_llama_model(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as exc:
        tiny_gguf_write(tmp_path / "m.gguf", n_vocab=100, n_embd=30, n_head=4, n_head_kv=3)
    message = str(exc.value)
    assert "n_vocab must be at least 259" in message
    assert "n_embd (30) must be a multiple of n_head (4)" in message
    assert "n_head (4) must be a multiple of n_head_kv (3)" in message

    with pytest.raises(ValueError, match="n_vocab too large: the built-in text supports at most"):
        tiny_gguf_write(tmp_path / "m.gguf", n_vocab=5000)
    assert not any(tmp_path.iterdir())


def test_it_reports_metadata_of_the_generated_file(tmp_path: Path) -> None:
    path = tiny_gguf_write(tmp_path / "m.gguf", n_vocab=700)

    assert tiny_gguf_metadata(path) == {
        "architecture": "llama", "name": "tiny-random", "tokenizer": "gpt2", "n_vocab": 700, "n_tensors": 21,
    }
    stored = json.loads(field(gguf.GGUFReader(str(path)), PARAMS_KEY))
    assert stored["n_vocab"] == 700 and stored["format"] == 1


def test_it_defaults_to_the_path_the_example_recipe_serves(settings, tmp_path: Path) -> None:
    from deployments.examples import example_recipe

    settings.VAR_DIR = tmp_path
    assert tiny_gguf_default_path() == tmp_path / "models" / "tiny-random.gguf"
    assert example_recipe("local-llamacpp")["spec"]["model"]["path"] == str(tiny_gguf_default_path())


# --- the management command ----------------------------------------------------------------------


def test_it_generates_then_keeps_the_model_from_the_command(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path
    expected = tmp_path / "models" / "tiny-random.gguf"

    out = StringIO()
    call_command("make_tiny_gguf", stdout=out)
    first = out.getvalue()
    assert first.startswith("wrote in ")
    assert f"{expected} (868096 bytes, 0.87 MB; 426624 weights; seed=0 n_vocab=512 n_embd=128 n_layer=2" in first
    inode = expected.stat().st_ino

    out = StringIO()
    call_command("make_tiny_gguf", stdout=out)
    assert out.getvalue().startswith(f"kept: {expected} (868096 bytes")
    assert expected.stat().st_ino == inode

    out = StringIO()
    call_command("make_tiny_gguf", "--force", stdout=out)
    assert out.getvalue().startswith("wrote in ")
    assert expected.stat().st_ino != inode


def test_it_takes_a_path_and_sizes_on_the_command_line(tmp_path: Path) -> None:
    out = StringIO()
    call_command("make_tiny_gguf", "--path", str(tmp_path / "x" / "small.gguf"), "--n-layer", "1",
                 "--n-vocab", "300", "--seed", "5", stdout=out)

    assert "seed=5 n_vocab=300 n_embd=128 n_layer=1" in out.getvalue()
    assert tiny_gguf_params(tmp_path / "x" / "small.gguf") == TinyGgufParams(seed=5, n_vocab=300, n_layer=1)


def test_it_fails_the_command_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"n_embd \(30\) must be a multiple of n_head \(4\)"):
        call_command("make_tiny_gguf", "--path", str(tmp_path / "m.gguf"), "--n-embd", "30")


# --- llama.cpp's own loader and tokenizer (in process) ----------------------------------------------


def test_it_loads_in_llama_cpp_and_round_trips_text_through_the_tokenizer(tmp_path: Path) -> None:
    import llama_cpp

    path = tiny_gguf_write(tmp_path / "m.gguf")
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, n_threads=1, verbose=False)
    try:
        assert llm.n_vocab() == 512
        assert llm.n_ctx() == 256
        assert llm.token_bos() == 509 and llm.token_eos() == 509
        text = "Prefill fills the KV cache; decode streams tokens. Ünïcödé ✓ 42"
        ids = llm.tokenize(text.encode(), add_bos=False)
        # Learnt merges make common words single tokens; bytes cover everything else.
        assert len(ids) < len(text.encode())
        assert llm.tokenize(b" the", add_bos=False) == [llm.tokenize(b" the", add_bos=False)[0]]
        assert llm.detokenize(ids).decode() == text
        assert llm.tokenize(b"hi")[0] == 509

        first = llm.create_completion("Hello", max_tokens=6, temperature=0)
        second = llm.create_completion("Hello", max_tokens=6, temperature=0)
        assert first["usage"]["completion_tokens"] == 6
        assert first["choices"][0]["finish_reason"] == "length"
        assert first["choices"][0]["text"] == second["choices"][0]["text"]
    finally:
        llm.close()


def test_it_renders_every_allowlisted_flag_in_a_form_the_real_server_parses(settings) -> None:
    import argparse

    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    from deployments.engines.llamacpp import WORKER_FLAGS
    from deployments.examples import example_recipe, local_node_facts_example
    from deployments.launch import launch_plan_render

    settings.CEILING_MODEL_ROOTS = ["/models"]
    flags = {"n_ctx": 512, "n_batch": 64, "n_ubatch": 32, "n_threads": 1, "n_threads_batch": 2, "seed": 7,
             "chat_format": "chatml", "use_mmap": False, "use_mlock": False, "flash_attn": True, "verbose": False,
             "cache": True, "cache_type": "disk", "cache_size": 1024, "rope_freq_base": 10000.0,
             "rope_freq_scale": 0.5}
    assert set(flags) == set(WORKER_FLAGS)
    spec = example_recipe("local-llamacpp")["spec"]
    spec["model"]["path"] = "/models/tiny.gguf"
    spec["roles"]["single"]["flags"] = flags
    plan = launch_plan_render(engine="llamacpp", topology="single", spec=spec,
                              node=local_node_facts_example(cpu_count=2, numactl=False))
    argv = plan.process("single").argv
    assert argv[1:3] == ["-m", "llama_cpp.server"]

    # The server builds its command line from these pydantic models (llama_cpp/server/__main__.py).
    parser = argparse.ArgumentParser()
    add_args_from_model(parser, Settings)
    parser.add_argument("--config_file", type=str)
    args = parser.parse_args(argv[3:])
    model = parse_model_from_args(ModelSettings, args)
    server = parse_model_from_args(ServerSettings, args)

    assert model.model == "/models/tiny.gguf" and model.model_alias == "tiny-random"
    assert (server.host, server.port) == ("127.0.0.1", 31090)
    assert {name: getattr(model, name) for name in flags} == flags


# --- the real server -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A ``llama_cpp.server`` child in its own session, output to a log file."""

    def __init__(self, argv: list[str], log: Path, base_url: str, env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.log = log
        self.base_url = base_url
        with open(log, "wb") as out:
            self.popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True, env={**os.environ, **(env or {})})

    def wait_ready(self, path: str = "/v1/models", timeout_s: float = STARTUP_TIMEOUT_S) -> httpx.Response:
        """Poll ``path`` until it answers 200; fail with the log when the process exits or time runs out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                pytest.fail(f"server exited with {self.popen.returncode}:\n{self.log.read_text()[-4000:]}")
            try:
                response = httpx.get(self.base_url + path, timeout=2.0)
                if response.status_code == 200:
                    return response
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        pytest.fail(f"server not ready after {timeout_s} s:\n{self.log.read_text()[-4000:]}")

    def stop(self, grace_s: float = 10.0) -> int:
        """SIGTERM the group, SIGKILL after ``grace_s``; returns the exit code."""
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=10)
        return self.popen.returncode


def server_argv(model: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
            "--port", str(port), "--n_threads", "1", "--n_ctx", "256"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("llamacpp")
    model = tiny_gguf_write(root / "tiny-random.gguf")
    port = free_port()
    srv = Server(server_argv(model, port), root / "server.log", f"http://127.0.0.1:{port}")
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def sse_events(response: httpx.Response) -> list[dict | str]:
    """Parse an SSE body into JSON payloads, ``"[DONE]"`` kept as a string."""
    events: list[dict | str] = []
    for line in response.iter_lines():
        if not line.startswith("data: "):
            assert line == "", f"unexpected SSE line {line!r}"
            continue
        data = line[len("data: "):]
        events.append(data if data == "[DONE]" else json.loads(data))
    return events


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_it_serves_the_model_list_and_has_no_health_route(server: Server) -> None:
    models = httpx.get(server.base_url + "/v1/models", timeout=REQUEST_TIMEOUT_S).json()
    assert [m["id"] for m in models["data"]] == [server.argv[server.argv.index("--model") + 1]]

    # Readiness must not expect /health on this engine.
    assert httpx.get(server.base_url + "/health", timeout=REQUEST_TIMEOUT_S).status_code == 404


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_it_completes_exactly_max_tokens_deterministically(server: Server) -> None:
    body = {"prompt": "The router sends the request to", "max_tokens": 8, "temperature": 0}
    first = httpx.post(server.base_url + "/v1/completions", json=body, timeout=REQUEST_TIMEOUT_S)
    second = httpx.post(server.base_url + "/v1/completions", json=body, timeout=REQUEST_TIMEOUT_S)
    tokenized = httpx.post(server.base_url + "/extras/tokenize", json={"input": body["prompt"]},
                           timeout=REQUEST_TIMEOUT_S).json()

    assert first.status_code == 200, first.text
    data = first.json()
    assert data["object"] == "text_completion"
    assert data["choices"][0]["finish_reason"] == "length"
    # The prompt count includes the BOS token the model adds.
    assert tokenized["tokens"][0] == 509
    assert data["usage"] == {"prompt_tokens": len(tokenized["tokens"]), "completion_tokens": 8,
                             "total_tokens": len(tokenized["tokens"]) + 8}
    assert second.json()["choices"][0]["text"] == data["choices"][0]["text"]
    assert all(ch.isprintable() or ch == "\n" for ch in data["choices"][0]["text"])


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_it_samples_exactly_max_tokens_with_the_default_top_k(server: Server) -> None:
    texts = set()
    for seed in range(5):
        data = httpx.post(server.base_url + "/v1/completions", timeout=REQUEST_TIMEOUT_S,
                          json={"prompt": "Sample", "max_tokens": 16, "temperature": 1.0, "seed": seed}).json()
        assert data["usage"]["completion_tokens"] == 16
        assert data["choices"][0]["finish_reason"] == "length"
        assert data["choices"][0]["text"].isascii()
        texts.add(data["choices"][0]["text"])
    assert len(texts) == 5


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_it_streams_one_sse_chunk_per_token_without_usage(server: Server) -> None:
    body = {"prompt": "Decode is limited by memory bandwidth", "max_tokens": 8, "temperature": 0}
    plain = httpx.post(server.base_url + "/v1/completions", json=body, timeout=REQUEST_TIMEOUT_S).json()

    with httpx.stream("POST", server.base_url + "/v1/completions", timeout=REQUEST_TIMEOUT_S,
                      json={**body, "stream": True, "stream_options": {"include_usage": True}}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)

    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 8 + ["length"]
    assert all("usage" not in c for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == plain["choices"][0]["text"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_it_streams_chat_completions_through_the_gguf_chat_template(server: Server) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is TTFT?"}]
    plain = httpx.post(server.base_url + "/v1/chat/completions", timeout=REQUEST_TIMEOUT_S,
                       json={"messages": messages, "max_tokens": 6, "temperature": 0}).json()
    templated = ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is TTFT?<|im_end|>\n"
                 "<|im_start|>assistant\n")
    count = httpx.post(server.base_url + "/extras/tokenize/count", json={"input": templated},
                       timeout=REQUEST_TIMEOUT_S).json()["count"]

    assert plain["object"] == "chat.completion"
    assert plain["choices"][0]["message"]["role"] == "assistant"
    assert plain["choices"][0]["finish_reason"] == "length"
    assert plain["usage"]["completion_tokens"] == 6
    # The prompt is the ChatML rendering, control tokens counted as one token each; the chat
    # path adds no BOS (the template owns its special tokens) while /extras/tokenize does.
    assert plain["usage"]["prompt_tokens"] == count - 1

    with httpx.stream("POST", server.base_url + "/v1/chat/completions", timeout=REQUEST_TIMEOUT_S,
                      json={"messages": messages, "max_tokens": 6, "temperature": 0, "stream": True,
                            "stream_options": {"include_usage": True}}) as response:
        assert response.status_code == 200
        events = sse_events(response)

    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    content = chunks[1:-1]
    assert len(content) == 6
    assert all(set(c["choices"][0]["delta"]) == {"content"} for c in content)
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}
    assert all("usage" not in c for c in chunks)
    assert "".join(c["choices"][0]["delta"]["content"] for c in content) == plain["choices"][0]["message"]["content"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_it_decodes_tens_of_tokens_per_second_on_one_thread(server: Server) -> None:
    body = {"prompt": "Tokens per second", "max_tokens": 128, "temperature": 0}
    httpx.post(server.base_url + "/v1/completions", json=body, timeout=REQUEST_TIMEOUT_S)  # warm-up
    started = time.monotonic()
    data = httpx.post(server.base_url + "/v1/completions", json=body, timeout=REQUEST_TIMEOUT_S).json()
    elapsed = time.monotonic() - started

    assert data["usage"]["completion_tokens"] == 128
    rate = 128 / elapsed
    print(f"llama.cpp tiny model: {rate:.0f} tokens/s end to end (128 tokens, 1 thread)")
    assert rate > 20


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_it_starts_the_rendered_local_llamacpp_plan(settings, tmp_path: Path) -> None:
    from deployments.examples import example_recipe, local_node_facts_example
    from deployments.launch import launch_plan_render

    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("the example pins CPUs 0-1, which this process may not use")
    settings.VAR_DIR = tmp_path
    settings.CEILING_MODEL_ROOTS = [str(tmp_path / "models")]
    settings.CEILING_EXECUTABLES = {**settings.CEILING_EXECUTABLES, "python": sys.executable}
    tiny_gguf_write(tiny_gguf_default_path())
    recipe = example_recipe("local-llamacpp")
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", recipe["spec"]["roles"]["single"]["port"]))
        except OSError:
            recipe["spec"]["roles"]["single"]["port"] = free_port()
    numactl = shutil.which(settings.CEILING_EXECUTABLES["numactl"]) is not None
    plan = launch_plan_render(engine=recipe["engine"], topology=recipe["topology"], spec=recipe["spec"],
                              node=local_node_facts_example(cpu_count=os.cpu_count() or 2, numactl=numactl))
    proc = plan.process("single")
    port = recipe["spec"]["roles"]["single"]["port"]

    engine_argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(tiny_gguf_default_path()),
                   "--model_alias", "tiny-random", "--host", "127.0.0.1", "--port", str(port),
                   "--interrupt_requests", "false", "--n_ctx", "512", "--n_threads", "2"]
    if numactl:
        assert proc.pin_method == "numactl"
        assert proc.wrapper[0] == settings.CEILING_EXECUTABLES["numactl"]
        assert "--physcpubind=0-1" in proc.wrapper and proc.wrapper[-1] == "--"
        assert proc.argv == [*proc.wrapper, *engine_argv]
    else:
        assert proc.pin_method == "sched_setaffinity"
        assert proc.argv == engine_argv
    assert proc.env == {"CUDA_VISIBLE_DEVICES": ""}
    assert [c["kind"] for c in proc.readiness] == ["process_alive", "http", "generate"]

    srv = Server(proc.argv, tmp_path / "single.log", f"http://127.0.0.1:{port}", env=proc.env)
    try:
        models = srv.wait_ready(timeout_s=float(plan.startup_timeout_s)).json()
        assert [m["id"] for m in models["data"]] == ["tiny-random"]
        if numactl:
            status = Path(f"/proc/{srv.popen.pid}/status").read_text()
            assert "Cpus_allowed_list:\t0-1\n" in status
        for check in proc.readiness[1:]:
            response = httpx.request(check["method"], check["url"], json=check.get("json"), timeout=REQUEST_TIMEOUT_S)
            assert response.status_code == check["expect"]["status"], (check, response.text)
        generated = httpx.post(proc.generate_url, json=proc.readiness[-1]["json"], timeout=REQUEST_TIMEOUT_S).json()
        assert generated["model"] == "tiny-random"
        assert generated["usage"]["completion_tokens"] == 1
    finally:
        code = srv.stop(grace_s=float(plan.stop_grace_s))
    # uvicorn shuts down gracefully on SIGTERM and then re-raises the signal, so a clean stop
    # reads as "killed by SIGTERM" to the parent.
    assert code == -signal.SIGTERM, srv.log.read_text()[-4000:]
    assert "Application shutdown complete." in srv.log.read_text()
