"""Redaction masks secrets and secret-shaped values, and leaves engine vocabulary alone."""
import pytest

from controlplane.redaction import REDACTED, redact_text, register_secret_value


@pytest.mark.parametrize("text", [
    "HF_TOKEN=hf_abcdefghijklmnopqrstu",
    "DB_PASSWORD=hunter2222",
    "OPENAI_API_KEY: sk-1234567890",
    "token=abcd1234",
    "password: hunter22",
    "api-key=xyz12345",
    "Authorization: Bearer abcdefghijkl",
    "loaded hf_abcdefghijklmnopqrstuvwx from env",
])
def test_it_masks_secret_shaped_values(text):
    assert REDACTED in redact_text(text)


@pytest.mark.parametrize("text", [
    "Using chat eos_token: <|endoftext|>",
    "bos_token_id=1 eos_token_id=2",
    "sglang:prompt_tokens_total 152612",
    "max_tokens: 256",
])
def test_it_leaves_engine_vocabulary_alone(text):
    assert redact_text(text) == text


def test_it_masks_a_registered_value_anywhere():
    register_secret_value("s3cr3t-v4lue-xyz")
    assert redact_text("argv --key s3cr3t-v4lue-xyz end") == f"argv --key {REDACTED} end"
