"""The Hugging Face pattern covers tokens with ``_`` and ``-`` and leaves snake_case
vocabulary that starts with ``hf_`` alone."""
import pytest

from controlplane.redaction import REDACTED, redact_text


@pytest.mark.parametrize("token", ["hf_SUPERSECRET_abc123XYZ", "hf_abc-DEF_ghi-JKL_0123", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"])
def test_it_masks_a_hugging_face_token_whole(token):
    assert redact_text(f"fetching with credential {token} now") == f"fetching with credential {REDACTED} now"


@pytest.mark.parametrize("text", [
    "hf_quantization_config=None, hf_overrides={}",
    "hf_chat_template_name: default",
])
def test_it_leaves_hf_prefixed_vocabulary_alone(text):
    assert redact_text(text) == text
