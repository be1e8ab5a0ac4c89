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


@pytest.mark.parametrize("spelling", [
    "p%40ss%2Fw0rd%3Dx%20y",          # percent-encoded, as in a URL query
    "p%40ss%2Fw0rd%3Dx+y",            # form-encoded (quote_plus)
    "cEBzcy93MHJkPXggeQ==",           # base64, padded
    "cEBzcy93MHJkPXggeQ",             # base64, unpadded
])
def test_it_masks_a_registered_value_in_its_encoded_spellings(spelling):
    import base64
    import urllib.parse

    value = "p@ss/w0rd=x y"
    # The spellings above are the value's own encodings, not hand-made strings that merely look so.
    assert spelling in {urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value, safe=""),
                        base64.b64encode(value.encode()).decode(), base64.b64encode(value.encode()).decode().rstrip("=")}
    register_secret_value(value)
    assert redact_text(f"GET /v1/models?key={spelling}&x=1") == f"GET /v1/models?key={REDACTED}&x=1"


def test_it_masks_a_json_escaped_value_and_each_long_line_of_a_multi_line_value():
    import json

    value = 'line-one "quoted" \\ back\n' + "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n" + "end"
    register_secret_value(value)
    dumped = json.dumps({"env": {"KEY": value}})
    assert "MIIEvQ" not in redact_text(dumped) and REDACTED in redact_text(dumped)
    assert redact_text("key line: MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n") == f"key line: {REDACTED}\n"
    # A short line of the value ("end") is ordinary text and stays.
    assert redact_text("the end of the log") == "the end of the log"


def test_value_forms_leaves_out_short_forms_and_non_text():
    from controlplane.redaction import value_forms

    assert value_forms(None) == set() and value_forms(12345) == set()
    assert value_forms("abc") == set() and value_forms("  ab  ") == set()  # too short once stripped
    assert "abcd" in value_forms(" abcd \n") and " abcd \n" in value_forms(" abcd \n")


def test_a_registered_value_inside_a_longer_token_masks_the_whole_token_and_never_its_tail():
    # a stored secret that is the start of a longer token-shaped string: masking the stored value
    # alone, then the patterns, used to leave the token's last characters shown (``***redacted***6789``)
    register_secret_value("hf_Zyxwvutsrqponmlkjihgfedcba012345")
    text = "argv: --flag hf_Zyxwvutsrqponmlkjihgfedcba0123456789 done"
    assert redact_text(text) == f"argv: --flag {REDACTED} done"
    # a token-shaped part of a registered value: the whole value is masked, not only that part
    register_secret_value("prefix-of-AKIAIOSFODNN7EXAMPLE-suffix")
    assert redact_text("key prefix-of-AKIAIOSFODNN7EXAMPLE-suffix end") == f"key {REDACTED} end"
    # two secrets side by side with nothing between them are one mask
    assert redact_text("x hf_Zyxwvutsrqponmlkjihgfedcba012345prefix-of-AKIAIOSFODNN7EXAMPLE-suffix y") == (
        f"x {REDACTED} y")
