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
    assert value_forms("abcdefg") == set() and value_forms("  abcdef  ") == set()  # too short once stripped
    assert "abcdefgh" in value_forms(" abcdefgh \n") and " abcdefgh \n" in value_forms(" abcdefgh \n")


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


@pytest.mark.parametrize("spelling", [
    "Pa%20ss%40w%2Frd%2BLong99",   # every reserved character encoded, upper-case hex
    "Pa%20ss%40w%2frd%2bLong99",   # lower-case hex
    "Pa%20ss@w/rd+Long99",         # only the space encoded, as curl and browsers send it
    "Pa+ss%40w%2Frd%2BLong99",     # a form body: the space as '+'
    "%50a%20ss%40w%2Frd%2BLong%39%39",  # characters that need no encoding encoded all the same
])
def test_it_masks_a_registered_value_in_any_percent_encoding(spelling):
    import urllib.parse

    value = "Pa ss@w/rd+Long99"
    # Each spelling is the value percent-encoded, not a hand-made string that merely looks so.
    assert urllib.parse.unquote(spelling.replace("+ss", "%20ss")) == value
    register_secret_value(value)
    assert redact_text(f"POST /login a={spelling}&b=1") == f"POST /login a={REDACTED}&b=1"


def test_it_masks_every_percent_encoding_of_a_value_on_one_line():
    register_secret_value("Pa ss@w/rd+Long99")
    line = "a=Pa%20ss%40w%2Frd%2BLong99&c=Pa%20ss%40w%2frd%2bLong99&d=Pa%20ss@w/rd+Long99"
    assert redact_text(line) == f"a={REDACTED}&c={REDACTED}&d={REDACTED}"


@pytest.mark.parametrize("spelling", ["sk%2DZZTOPSECRETzz9876", "sk%2dZZTOPSECRETzz9876"])
def test_it_masks_a_key_whose_dash_is_percent_encoded(spelling):
    # The token-shaped pattern for ``sk-`` keys does not see ``sk%2D``: only the stored value does.
    register_secret_value("sk-ZZTOPSECRETzz9876")
    assert redact_text(f"GET /v1/models?key={spelling}&x=1") == f"GET /v1/models?key={REDACTED}&x=1"


def test_it_masks_a_non_ascii_value_by_its_utf8_bytes_and_a_base64_form_percent_encoded():
    import base64

    register_secret_value("mot-de-passe-été!")
    assert redact_text("p=mot-de-passe-%C3%A9t%c3%a9%21 end") == f"p={REDACTED} end"
    padded = base64.b64encode("mot-de-passe-été!".encode()).decode()
    assert padded.endswith("=")
    encoded = padded.replace("=", "%3D").replace("+", "%2B").replace("/", "%2F")
    assert redact_text(f"auth={encoded}&x=1") == f"auth={REDACTED}&x=1"


def test_it_leaves_a_near_miss_of_a_registered_value_alone():
    register_secret_value("Pa ss@w/rd+Long99")
    # one character different, or a byte that decodes to another character, is not the value
    for text in ("a=Pa%20ss%40w%2Frd%2BLong98", "a=Pa%21ss%40w%2Frd%2BLong99", "a=pa%20ss%40w%2Frd%2BLong99"):
        assert redact_text(text) == text
