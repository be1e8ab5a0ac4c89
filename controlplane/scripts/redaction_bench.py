#!/usr/bin/env python3
"""Speed of secret redaction (:func:`controlplane.redaction.redact_text`) on a 1 MB log tail,
side by side with the straightforward implementation it replaced, kept here as
:func:`reference_redact`: one scan of the whole text per form of each secret, and one per
token-shaped pattern.

Two texts are timed: an engine log (progress bars, ``tokens/s``, ``eos_token``, paths) and the
same log with a percent-encoded query on every line (an access log), where the value patterns
cannot skip the text around each ``%XX``. Each cell runs 0, 1 and 20 registered secrets (values
of 24 to 48 characters with ``/``, ``+`` and spaces, so every spelling of
:func:`controlplane.redaction.value_forms` is in play). Both implementations must give the same
text; the script exits 1 when they differ.

Usage::

    .venv/bin/python controlplane/scripts/redaction_bench.py            # 1 MB, best of 3
    .venv/bin/python controlplane/scripts/redaction_bench.py --mb 4 --repeat 5

No database is needed: the secrets are registered in this process only.
"""
from __future__ import annotations

import argparse
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from controlplane import redaction  # noqa: E402

# The token-shaped patterns as they were before they were written for speed (look-behinds and
# word boundaries in front, every pattern run over the whole text).
REFERENCE_TOKEN_PATTERNS = [re.compile(p) for p in (
    r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}",
    r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{20,}",
    r"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{20,}",
    r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{20,}",
    r"(?<![A-Za-z0-9])AKIA[0-9A-Z]{16}(?![A-Za-z0-9])",
    r"(?<![A-Za-z0-9])xox[baprs]-[A-Za-z0-9-]{10,}",
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----(?:[\s\S]*?-----END[A-Z0-9 ]*PRIVATE KEY-----|[^\n]*(?:\r?\n[A-Za-z0-9+/=]{16,})*)",
    r"\bhf_(?=[A-Za-z0-9_-]*[A-Z0-9])[A-Za-z0-9_-]{16,}",
    r"\bhf_[A-Za-z0-9]{16,}\b",
    r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}",
    r"(\b[A-Z0-9_]*(?:TOKEN|PASSWORD|SECRET|API_KEY)\s*[=:]\s*)[^\s,;'\"]{4,}",
    r"(?i)(\b(?:(?:hf|access|auth|api)[_-])?(?:api[_-]?key|token|password|secret)\s*[=:]\s*)[^\s,;'\"]{4,}",
)]


def reference_redact(text: str, forms: frozenset[str]) -> str:
    """``text`` redacted the straightforward way: every pattern of ``forms``
    (:func:`controlplane.redaction._patterns_for`) searched over the whole text at every
    position it matches, every token pattern by ``finditer``, and the spans merged as
    :func:`controlplane.redaction.redact_text` merges them."""
    if not text:
        return text
    spans: list[tuple[int, int]] = []
    for pattern in redaction._patterns_for(forms):
        m = pattern.search(text)
        while m:
            spans.append(m.span())
            m = pattern.search(text, m.start() + 1)
    for pattern in REFERENCE_TOKEN_PATTERNS:
        for m in pattern.finditer(text):
            begin = m.end(1) if pattern.groups else m.start()
            if m.end() > begin:
                spans.append((begin, m.end()))
    if not spans:
        return text
    spans.sort()
    out, at, (lo, hi) = [], 0, spans[0]
    for begin, end in spans[1:]:
        if begin <= hi:
            hi = max(hi, end)
            continue
        out += [text[at:lo], redaction.REDACTED]
        at, lo, hi = hi, begin, end
    out += [text[at:lo], redaction.REDACTED, text[hi:]]
    return "".join(out)


_LOG_WORDS = (
    "INFO WARNING engine step prefill decode throughput: 1834.2 tokens/s max_num_batched_tokens=8192 "
    "eos_token: <|endoftext|> GPU KV cache usage: 45.2%, Running: 3 reqs hf_quantization_config=None "
    "api_server.py:123 Loading safetensors checkpoint shards: 50% Completed | 1/2 [00:01<00:01, 1.2it/s] "
    "/models/qwen2.5-7b/config.json OK 200 POST /v1/chat/completions"
).split()


def log_text(size: int, *, percent: bool, seed: int = 7) -> str:
    """About ``size`` characters of engine log, with a percent-encoded query on every line
    when ``percent``."""
    rng = random.Random(seed)
    lines, total = [], 0
    while total < size:
        line = " ".join(rng.choice(_LOG_WORDS) for _ in range(12))
        if percent:
            line += " GET /v1/models?name=qwen%2F7b&q=a%20b+c HTTP/1.1"
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)[:size]


def secret_values(count: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/+ -_"
    return [f"s{i:02d}-" + "".join(rng.choice(alphabet) for _ in range(rng.randint(20, 44))) for i in range(count)]


def best_of(repeat: int, fn) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=1.0, help="size of the log text in MB (default 1)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell; the best is shown (default 3)")
    args = parser.parse_args(argv)
    size = int(args.mb * 1_000_000)
    # Redaction reads stored values from the database when Django is set up; here it is not, so
    # only the values registered below are masked.
    print(f"{'text':<16} {'secrets':>7} {'reference ms/MB':>16} {'current ms/MB':>14} {'speed-up':>9}")
    same = True
    for percent in (False, True):
        text = log_text(size, percent=percent)
        # a few occurrences of each secret, some percent-encoded, so the masks are really built
        for count in (0, 1, 20):
            redaction._known_values.clear()
            values = secret_values(count)
            for value in values:
                redaction.register_secret_value(value)
            sample = text
            for value in values:
                cut = len(sample) // 2
                sample = sample[:cut] + f" key={value} url=?v={redaction.urllib.parse.quote(value)} " + sample[cut:]
            forms = frozenset(redaction._known_values)
            redaction._known_patterns()  # compile outside the timing, as a warm server has
            ref = best_of(args.repeat, lambda: reference_redact(sample, forms))
            cur = best_of(args.repeat, lambda: redaction.redact_text(sample))
            if reference_redact(sample, forms) != redaction.redact_text(sample):
                same = False
                print(f"  the two implementations differ on {'%-dense' if percent else 'plain'} text with {count} secrets")
            per_mb = 1_000_000 / len(sample) * 1000
            print(f"{'%-dense log' if percent else 'engine log':<16} {count:>7} {ref * per_mb:>16.1f} {cur * per_mb:>14.1f} "
                  f"{ref / cur:>8.1f}x")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
