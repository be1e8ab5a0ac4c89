"""A tiny random-weight llama-architecture GGUF model, generated locally for the llama.cpp engine.

The embedded default needs a real model for llama.cpp (through ``llama-cpp-python``) without
downloading one, so :func:`tiny_gguf_write` builds a small GGUF file with the ``gguf`` package:

* architecture ``llama`` (RMSNorm, rotary position embeddings, SwiGLU feed-forward, grouped-query
  attention) with every hyperparameter key llama.cpp reads for it (``llama.context_length``,
  ``llama.embedding_length``, ``llama.block_count``, ``llama.feed_forward_length``,
  ``llama.attention.head_count``/``head_count_kv``, ``llama.attention.layer_norm_rms_epsilon``,
  ``llama.rope.dimension_count``, ``llama.rope.freq_base``, ``llama.vocab_size``);
* weights drawn from a seeded normal distribution (numpy), 2-D matrices stored as F16 and norm
  vectors as F32 (``general.file_type`` = 1, "mostly F16"), so the same seed and sizes always give
  the same bytes;
* a byte-level BPE tokenizer of the GPT-2 kind (``tokenizer.ggml.model = "gpt2"``, pre-tokenizer
  ``gpt-2``): the 256 byte tokens, merges learnt at generation time from a short built-in text
  about serving language models, and three control tokens (``<|endoftext|>`` as BOS and EOS,
  ``<|im_start|>``, ``<|im_end|>``) used by a ChatML chat template stored as
  ``tokenizer.chat_template``.

The text it produces is meaningless, but the whole serving path (tokenizer, prefill, KV cache,
decode, sampling, streaming) is llama.cpp's own. Rows of the output projection are zero for the
control tokens and for every token that is not printable ASCII (or a newline), so those tokens'
logits are always exactly 0 while the largest of the hundreds of random logits is positive with
overwhelming probability. Greedy decoding (temperature 0) therefore

* never ends a completion early with EOS, so ``max_tokens: N`` yields exactly N tokens;
* only emits whole UTF-8 characters: llama-cpp-python holds back a token that ends in a UTF-8
  lead byte and skips its ``max_tokens`` check for it, so a byte token such as ``0xC3`` would let
  a completion run up to 3 tokens past ``max_tokens``;
* produces printable text. Prompts may still use any byte: the embedding rows are all random.

Sampling with a top-k cut (llama-cpp-python's server defaults to ``top_k`` 40) keeps the same
guarantees, because about half of the ~350 tokens greedy decoding may pick have a positive logit
at every step, so the zero-logit tokens never make the cut; only ``top_k: 0`` at a temperature
above 0 can reach them.

The generation parameters are stored in the file under :data:`PARAMS_KEY`; a file is "valid" for
a set of parameters when it parses as GGUF and carries exactly those parameters, which is what
makes :func:`tiny_gguf_write` idempotent.
"""
from __future__ import annotations

import json
import logging
import os
import re
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

PARAMS_KEY = "ceiling.tiny_gguf.params"
FORMAT_VERSION = 1  # bump when the layout changes so existing files are regenerated
DEFAULT_FILENAME = "tiny-random.gguf"

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
N_BYTE_TOKENS = 256

# ChatML: the role/content framing many chat models use; llama-cpp-python renders it with Jinja2
# when the GGUF carries ``tokenizer.chat_template`` and no ``--chat_format`` is given.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Text the BPE merges are learnt from. Its only job is to give the tokenizer realistic
# multi-byte tokens; any UTF-8 text still tokenizes through the byte tokens.
_CORPUS = """
Serving a large language model is a pipeline of two very different phases. Prefill reads the
whole prompt at once, computes attention over every input token and fills the KV cache; it is
limited by arithmetic throughput and its latency is the time to first token (TTFT). Decode then
produces one token per step for every running request, reading the weights and the cached keys
and values again each step; it is limited by memory bandwidth and its latency is the time per
output token (TPOT). Prefill-decode disaggregation runs the two phases on separate servers, so a
long prompt never stalls the tokens other users are waiting for, and moves the KV cache from the
prefill server to the decode server over a fast transfer backend. A router in front accepts the
requests, picks a prefill worker and a decode worker, and streams the generated text back.

Tensor parallelism (TP) splits each weight matrix across several GPUs; data parallelism (DP)
runs independent replicas; expert parallelism (EP) spreads the experts of a mixture of experts
model over the devices. Each process is pinned to the CPUs and memory of the NUMA node closest to
its GPUs, because a thread that crosses the interconnect on every kernel launch slows the whole
engine down. Throughput is measured in tokens per second for a sweep of concurrency, input length
and output length, and the numbers are compared with earlier runs of the same recipe.

When the decode step takes far longer than the memory traffic explains, the cause is often one
kernel: a fallback implementation that launches too few blocks to fill the streaming
multiprocessors, or a sparse attention path that was never tuned for the hardware. Building
several variants of that kernel over a grid of block sizes and measuring each one on the real
device shows where the ceiling of the deployment really is. The control plane keeps every recipe,
every launch, every benchmark and every build as a row, with the exact command line, the
environment, the logs and the timings, so that a result can always be reproduced and explained.
Operators start, stop and restart deployments from the web pages or the API; viewers can read the
results; administrators manage nodes, secrets and users. Health checks, readiness probes, one
token generations and router worker lists decide when a server is ready to take traffic.
"""

# GPT-2-style pre-tokenization (contractions, letter runs, digit runs, punctuation runs, spaces),
# written with the ASCII classes Python's ``re`` offers; it only shapes which merges are learnt.
_PRETOKEN_RE = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


@dataclass(frozen=True)
class TinyGgufParams:
    """Sizes and seed of a generated model.

    ``n_vocab``: total tokens (256 byte tokens + learnt merges + 3 control tokens); ``n_embd``:
    hidden size; ``n_layer``: transformer blocks; ``n_head`` / ``n_head_kv``: query and key/value
    heads (``n_embd`` must divide by ``n_head``, ``n_head`` by ``n_head_kv``); ``n_ff``:
    feed-forward size; ``n_ctx``: trained context length in tokens (the server's ``--n_ctx`` may
    not exceed it without RoPE scaling); ``seed``: numpy RNG seed for the weights.
    """

    seed: int = 0
    n_vocab: int = 512
    n_embd: int = 128
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 256
    n_ctx: int = 2048

    def problems(self) -> list[str]:
        """Reasons these parameters cannot make a llama model, as sentences; empty when fine."""
        out: list[str] = []
        min_vocab = N_BYTE_TOKENS + len(SPECIAL_TOKENS)
        if self.n_vocab < min_vocab:
            out.append(f"n_vocab must be at least {min_vocab} (256 byte tokens + {len(SPECIAL_TOKENS)} control tokens)")
        for name in ("n_embd", "n_layer", "n_head", "n_head_kv", "n_ff", "n_ctx"):
            if getattr(self, name) < 1:
                out.append(f"{name} must be at least 1")
        if self.seed < 0:
            out.append("seed must be non-negative")
        if self.n_head >= 1 and self.n_embd % self.n_head:
            out.append(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")
        elif self.n_head >= 1 and (self.n_embd // self.n_head) % 2:
            out.append("the head size n_embd / n_head must be even for rotary embeddings")
        if self.n_head_kv >= 1 and self.n_head % self.n_head_kv:
            out.append(f"n_head ({self.n_head}) must be a multiple of n_head_kv ({self.n_head_kv})")
        return out

    @property
    def head_dim(self) -> int:
        """Size of one attention head: ``n_embd // n_head``."""
        return self.n_embd // self.n_head

    @property
    def n_params(self) -> int:
        """Number of weights in the model (embeddings and output projection included)."""
        kv = self.n_head_kv * self.head_dim
        per_layer = 2 * self.n_embd + 2 * self.n_embd * self.n_embd + 2 * kv * self.n_embd + 3 * self.n_embd * self.n_ff
        return 2 * self.n_vocab * self.n_embd + self.n_embd + self.n_layer * per_layer

    def to_json(self) -> str:
        """Canonical JSON of the parameters plus :data:`FORMAT_VERSION` (what the file stores)."""
        return json.dumps({"format": FORMAT_VERSION, **asdict(self)}, sort_keys=True)


def tiny_gguf_default_path() -> Path:
    """``settings.VAR_DIR / "models" / "tiny-random.gguf"``: where setup puts the model and where
    the ``local-llamacpp`` example recipe points."""
    from django.conf import settings

    return Path(settings.VAR_DIR) / "models" / DEFAULT_FILENAME


def tiny_gguf_write(
    path: Path,
    *,
    seed: int = 0,
    n_vocab: int = 512,
    n_embd: int = 128,
    n_layer: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 256,
    n_ctx: int = 2048,
    force: bool = False,
) -> Path:
    """Write a random-weight llama GGUF model to ``path`` and return ``path``.

    Idempotent: when ``path`` already holds a GGUF file generated with the same parameters (see
    :func:`tiny_gguf_params`) nothing is written, unless ``force``. The file is written to a
    temporary name in the same directory, flushed to disk and renamed over ``path``, so readers
    never see a partial model. Parent directories are created. With the defaults the file is
    about 0.87 MB (~427k weights, F16) and takes well under a second to generate.

    Raises ``ValueError`` for parameters that cannot form a llama model (message lists every
    problem) or an ``n_vocab`` larger than the built-in text can supply merges for.
    """
    params = TinyGgufParams(seed=seed, n_vocab=n_vocab, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                            n_head_kv=n_head_kv, n_ff=n_ff, n_ctx=n_ctx)
    problems = params.problems()
    if problems:
        raise ValueError("; ".join(problems))
    path = Path(path)
    if not force and tiny_gguf_params(path) == params:
        return path

    tokens, merges = _bpe_vocab(params.n_vocab - len(SPECIAL_TOKENS))
    tokens = tokens + list(SPECIAL_TOKENS)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        _write(tmp, params, tokens, merges)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def tiny_gguf_params(path: Path) -> TinyGgufParams | None:
    """The generation parameters stored in ``path``, or None when ``path`` is missing, is not a
    readable GGUF file, is not a llama model, lacks :data:`PARAMS_KEY` or was written by another
    :data:`FORMAT_VERSION`. Reads only the header and metadata (memory-mapped)."""
    import gguf

    path = Path(path)
    if not path.is_file():
        return None
    try:
        reader = gguf.GGUFReader(str(path), "r")
        arch = _field_value(reader, "general.architecture")
        raw = _field_value(reader, PARAMS_KEY)
        if arch != "llama" or not isinstance(raw, str):
            return None
        data = json.loads(raw)
        if data.pop("format", None) != FORMAT_VERSION:
            return None
        params = TinyGgufParams(**data)
        expected_tensors = 3 + 9 * params.n_layer
        if len(reader.tensors) != expected_tensors:
            return None
        # A truncated file fails here: the last tensor must end inside the file.
        last = max(reader.tensors, key=lambda t: t.data_offset)
        if last.data_offset + last.n_bytes > path.stat().st_size:
            return None
        return params
    except (ValueError, KeyError, TypeError, OSError, IndexError):
        return None


def tiny_gguf_metadata(path: Path) -> dict[str, Any]:
    """Selected metadata of any GGUF file as plain Python values: ``general.architecture``,
    ``general.name``, ``tokenizer.ggml.model``, the vocabulary size and the tensor count.
    Raises ``ValueError``/``OSError`` for a file that is not GGUF."""
    import gguf

    reader = gguf.GGUFReader(str(path), "r")
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    return {
        "architecture": _field_value(reader, "general.architecture"),
        "name": _field_value(reader, "general.name"),
        "tokenizer": _field_value(reader, "tokenizer.ggml.model"),
        "n_vocab": len(tokens.data) if tokens is not None else None,
        "n_tensors": len(reader.tensors),
    }


def _field_value(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return None
    return field.contents()


def _byte_alphabet() -> list[str]:
    """One printable character per byte value, as byte-level BPE vocabularies spell tokens.

    Bytes that are printable Latin-1 characters stand for themselves; the others (controls,
    space, DEL, NBSP, soft hyphen) are moved to code points from U+0100 upward in byte order, so
    no token contains whitespace and a merge line "a b" splits unambiguously.
    """
    keep = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAC + 1)) | set(range(0xAE, 0xFF + 1))
    alphabet: list[str] = []
    shifted = 0
    for b in range(N_BYTE_TOKENS):
        if b in keep:
            alphabet.append(chr(b))
        else:
            alphabet.append(chr(0x100 + shifted))
            shifted += 1
    return alphabet


_BYTE_OF: dict[str, int] = {ch: b for b, ch in enumerate(_byte_alphabet())}


def _generable(token: str) -> bool:
    """Whether greedy decoding may emit ``token``: not a control token, and every byte it
    stands for is printable ASCII (0x20-0x7E) or a newline."""
    if token in SPECIAL_TOKENS:
        return False
    return all(ch in _BYTE_OF and (0x20 <= _BYTE_OF[ch] <= 0x7E or _BYTE_OF[ch] == 0x0A) for ch in token)


def _bpe_vocab(n_tokens: int) -> tuple[list[str], list[str]]:
    """Learn byte-level BPE merges from :data:`_CORPUS` until there are ``n_tokens`` distinct
    tokens (byte tokens first, ids 0-255 = byte values, then merged tokens in merge order).

    Returns ``(tokens, merges)`` with merges as ``"left right"`` strings in priority order. Ties
    between equally frequent pairs go to the lexicographically smallest pair, so the result is
    deterministic. Raises ``ValueError`` when the text runs out of pairs first.
    """
    alphabet = _byte_alphabet()
    word_counts = Counter(_PRETOKEN_RE.findall(_CORPUS.strip()))
    words: list[tuple[list[str], int]] = [
        ([alphabet[b] for b in word.encode("utf-8")], count) for word, count in word_counts.items()
    ]
    tokens = list(alphabet)
    known = set(tokens)
    merges: list[str] = []
    while len(tokens) < n_tokens:
        pairs: Counter[tuple[str, str]] = Counter()
        for symbols, count in words:
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] += count
        if not pairs:
            raise ValueError(f"n_vocab too large: the built-in text supports at most "
                             f"{len(tokens) + len(SPECIAL_TOKENS)} tokens")
        best_count = max(pairs.values())
        left, right = min(p for p, c in pairs.items() if c == best_count)
        merged = left + right
        merges.append(f"{left} {right}")
        if merged not in known:
            known.add(merged)
            tokens.append(merged)
        for symbols, _ in words:
            i = 0
            while i < len(symbols) - 1:
                if symbols[i] == left and symbols[i + 1] == right:
                    symbols[i:i + 2] = [merged]
                i += 1
    return tokens, merges


def _write(tmp: Path, params: TinyGgufParams, tokens: list[str], merges: list[str]) -> None:
    # The writer logs at INFO on the root handlers (endianness, each file written); callers
    # announce the result themselves, so that chatter is held back while writing.
    writer_log = logging.getLogger("gguf.gguf_writer")
    level = writer_log.level
    writer_log.setLevel(logging.WARNING)
    try:
        _write_model(tmp, params, tokens, merges)
    finally:
        writer_log.setLevel(level)


def _write_model(tmp: Path, params: TinyGgufParams, tokens: list[str], merges: list[str]) -> None:
    import gguf

    rng = np.random.default_rng(params.seed)
    n_vocab, n_embd, n_ff = params.n_vocab, params.n_embd, params.n_ff
    n_kv = params.n_head_kv * params.head_dim
    special_ids = [tokens.index(t) for t in SPECIAL_TOKENS]

    def matrix(rows: int, cols: int) -> np.ndarray:
        # Shape (out, in) as numpy sees it; the writer reverses it into ggml's (in, out) order.
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    def norm() -> np.ndarray:
        return np.ones(n_embd, dtype=np.float32)

    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_name("tiny-random")
    writer.add_description("Random weights and a byte-level BPE tokenizer; output text is meaningless.")
    writer.add_string(PARAMS_KEY, params.to_json())
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(params.n_ctx)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(params.n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(params.n_head)
    writer.add_head_count_kv(params.n_head_kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(params.head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(n_vocab)

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in SPECIAL_TOKENS else gguf.TokenType.NORMAL
                            for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(special_ids[0])
    writer.add_eos_token_id(special_ids[0])
    # A BOS token gives even an empty prompt one position to condition on.
    writer.add_add_bos_token(True)
    writer.add_chat_template(CHAT_TEMPLATE)

    writer.add_tensor("token_embd.weight", matrix(n_vocab, n_embd))
    for i in range(params.n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", norm())
        writer.add_tensor(f"blk.{i}.attn_q.weight", matrix(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.attn_k.weight", matrix(n_kv, n_embd))
        writer.add_tensor(f"blk.{i}.attn_v.weight", matrix(n_kv, n_embd))
        writer.add_tensor(f"blk.{i}.attn_output.weight", matrix(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", norm())
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", matrix(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", matrix(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", matrix(n_embd, n_ff))
    writer.add_tensor("output_norm.weight", norm())
    output = matrix(n_vocab, n_embd)
    # Tokens greedy decoding must never pick keep logit 0: see the module docstring.
    output[[i for i, t in enumerate(tokens) if not _generable(t)], :] = 0
    writer.add_tensor("output.weight", output)

    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
