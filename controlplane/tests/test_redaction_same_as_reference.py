"""The fast redaction masks exactly what the straightforward one masks (every form pattern and
every token pattern over the whole text), on random text built from the pieces that make the
patterns hard: secret values in mixed percent-encodings, key names, ``%XX``, ``+``, case folds."""
import importlib.util
import random
import urllib.parse
from pathlib import Path

import pytest

from controlplane import redaction

_BENCH = Path(__file__).resolve().parents[1] / "scripts" / "redaction_bench.py"


@pytest.fixture(scope="module")
def reference_redact():
    spec = importlib.util.spec_from_file_location("redaction_bench", _BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reference_redact


@pytest.fixture
def clean_values(monkeypatch):
    monkeypatch.setattr(redaction, "_known_values", set())
    monkeypatch.setattr(redaction, "_stored_values_refresh", lambda: None)


_VALUES = ["s3cr3t/v4l+ue x", "aaaa", "pä55 wörd/€", "abc%41def", "Tok3n_-_xyz==", "x y z w"]
_PIECES = [
    " ", "\n", "=", ":", "%", "+", "%2", "%4", "%41", "%2F", "%2f", "%20", "_", "-", "a", "Z", "9", "/",
    "HF_TOKEN", "TOKEN", "MY_SECRET", "API_KEY", "DB_PASSWORD", "token", "Token", "tokens", "api_key", "api-key",
    "apikey", "access_", "auth-", "hf_", "password", "secret", "SECRETOKEN", "bearer ", "Bearer\n", "BEARER  ",
    "eos_token: <|endoftext|>", "max_tokens: 256", "hf_quantization_config", "hf_AbCdEfGhIjKlMnOpQr12",
    "sk-abcdefghijklmnopqrstuv", "AKIAABCDEFGHIJKLMNOP", "ghp_abcdefghijklmnopqrstu", "xoxb-1234567890ab",
    "ſecret", "paſſword", "ıd", "İ", "K", "é", "=abcd1234", ": hunter22", "='quoted'",
]


def _spelled(value: str, rng: random.Random) -> str:
    """``value`` with each character as typed or percent-encoded (either hex case), at random."""
    out = []
    for char in value:
        roll = rng.random()
        if roll < 0.5:
            out.append(char)
        elif char == " " and roll < 0.6:
            out.append("+")
        else:
            quoted = urllib.parse.quote(char, safe="")
            out.append(quoted.lower() if roll > 0.8 else quoted)
    return "".join(out)


def test_it_masks_exactly_what_searching_every_pattern_everywhere_masks(reference_redact, clean_values):
    rng = random.Random(20240501)
    for value in _VALUES:
        redaction.register_secret_value(value)
    forms = frozenset(redaction._known_values)
    form_list = sorted(forms)
    for _ in range(1500):
        parts = []
        for _ in range(rng.randint(1, 30)):
            roll = rng.random()
            if roll < 0.15:
                parts.append(_spelled(rng.choice(form_list), rng))
            elif roll < 0.2:
                parts.append(rng.choice(form_list)[: rng.randint(1, 6)])
            else:
                parts.append(rng.choice(_PIECES))
        text = "".join(parts)
        assert redaction.redact_text(text) == reference_redact(text, forms), text


def test_with_no_secret_known_only_token_shapes_are_masked(reference_redact, clean_values):
    rng = random.Random(7)
    for _ in range(500):
        text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 30)))
        assert redaction.redact_text(text) == reference_redact(text, frozenset()), text
