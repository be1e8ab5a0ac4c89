"""The simulator's deterministic tokenizer and output text.

Token counting: a text is split on whitespace and every word counts ``ceil(len(word) / 4)``
tokens (4 characters per token is the usual rule of thumb for English BPE vocabularies). Output
tokens are words of at most 4 characters from :data:`VOCAB`, each emitted with a leading space, so
feeding a generated text back as a prompt counts exactly its number of output tokens. A chat
request counts its rendered template: every message adds :data:`CHAT_TOKENS_PER_MESSAGE` for the
role markers and the assistant turn adds :data:`CHAT_TOKENS_PRIMING` (the shape of common chat
templates; the exact numbers are the simulator's own).
"""
from __future__ import annotations

import hashlib
import math
from typing import Any

VOCAB: tuple[str, ...] = (
    "the", "kv", "of", "gpu", "and", "to", "node", "in", "is", "a", "rank", "for", "step",
    "on", "with", "page", "as", "at", "by", "it", "tp", "dp", "ep", "from", "that", "this",
    "data", "load", "warp", "sm", "fast", "slow", "head", "hot", "cold", "sync", "ring",
    "all", "gate", "moe", "ffn", "mla", "rope", "norm", "bias", "seed", "run", "log",
)
CHAT_TOKENS_PER_MESSAGE = 3
CHAT_TOKENS_PRIMING = 3
EOS_TOKEN_ID = 1
_VOCAB_BASE_ID = 100


def text_token_count(text: str) -> int:
    """Number of tokens in ``text`` under the simulator's tokenizer (see the module docstring)."""
    return sum(math.ceil(len(word) / 4) for word in text.split())


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # OpenAI content parts: only text parts carry tokens in the simulator.
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def chat_prompt(messages: list[dict[str, Any]]) -> tuple[str, int]:
    """Rendered prompt text and its token count for OpenAI chat ``messages``.

    Raises ``ValueError`` when ``messages`` is not a non-empty list of objects with a ``role``.
    """
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    parts: list[str] = []
    tokens = CHAT_TOKENS_PRIMING
    for msg in messages:
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise ValueError("every message needs a string role")
        text = _content_text(msg.get("content"))
        parts.append(f"{msg['role']}: {text}")
        tokens += CHAT_TOKENS_PER_MESSAGE + text_token_count(text)
    return "\n".join(parts), tokens


def prompt_digest(prompt: str | list[int], seed: int) -> int:
    """A stable 64-bit number from the prompt and the sampling seed (drives EOS and output words)."""
    raw = prompt if isinstance(prompt, str) else ",".join(map(str, prompt))
    return int.from_bytes(hashlib.blake2b(f"{seed}|{raw}".encode(), digest_size=8).digest(), "big")


def natural_length(digest: int, min_tokens: int, max_tokens: int) -> int:
    """Output tokens until the pseudo-EOS for a request whose :func:`prompt_digest` is ``digest``."""
    return min_tokens + digest % (max_tokens - min_tokens + 1)


def output_token(digest: int, index: int) -> tuple[int, str]:
    """Token id and text (with its leading space) of output token ``index`` (0-based)."""
    pos = (digest + index * 7919) % len(VOCAB)
    return _VOCAB_BASE_ID + pos, " " + VOCAB[pos]
