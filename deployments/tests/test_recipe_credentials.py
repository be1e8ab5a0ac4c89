"""A credential typed into a plain field of a recipe (a flag value, an env value) is refused
at its path, pointing at spec.secrets, and no answer holds it; a stored one from before is
shown shortened only (API, pages) and masked in any text the redactor sees (logs)."""
from __future__ import annotations

import copy
import json

import pytest

from controlplane.errors import InvalidInput
from controlplane.redaction import REDACTED, credential_find, credential_kind_said, credential_mask, redact_text
from deployments.examples import example_recipe, seed_node_facts_example
from deployments.forms import spec_pretty
from deployments.recipes import recipe_validate
from deployments.tests.factories import recipe_row_create, seed_node_create

HF = "hf_abcdefghijklmnopqrstuvwxyz0123456789"  # 39 characters
SK = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX"  # 32 characters
CREDENTIALS = {
    HF: "hf_…(39 chars)",
    SK: "sk-…(32 chars)",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789": "ghp_…(40 chars)",
    "github_pat_11ABCDEFG0123456789_abcdefghij": "github_pat_…(41 chars)",
    "AKIAIOSFODNN7EXAMPLE": "AKIA…(20 chars)",
    "xoxb-123456789012-abcdefghij": "xoxb-…(28 chars)",
    "-----BEGIN RSA PRIVATE KEY-----": "-----BEGIN…(31 chars)",
}


@pytest.fixture(autouse=True)
def _model_roots(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    settings.CEILING_MODEL_ROOTS = ["/models", str(tmp_path / "models")]


def seed_pd_spec() -> dict:
    return copy.deepcopy(example_recipe("seed-v4-flash-pd")["spec"])


def errors_of(spec: dict) -> dict[str, list[str]]:
    with pytest.raises(InvalidInput) as info:
        recipe_validate(engine="sglang", topology="pd", spec=spec, node=seed_node_facts_example())
    return info.value.errors


@pytest.mark.parametrize("value,short", list(CREDENTIALS.items()))
def test_it_refuses_each_credential_format_in_an_env_value_without_echoing_it(value, short):
    spec = seed_pd_spec()
    spec["env"] = {"SGLANG_FOO": value}
    errors = errors_of(spec)
    assert list(errors) == ["spec.env.SGLANG_FOO"]
    [message] = errors["spec.env.SGLANG_FOO"]
    assert message.startswith(f"spec.env.SGLANG_FOO looks like {credential_kind_said(credential_find(value)[0])} "
                              f"({short}): ")
    assert "reference it from spec.secrets" in message
    assert value not in message


def test_it_refuses_a_credential_in_a_flag_value_and_in_a_role_env_at_their_paths():
    spec = seed_pd_spec()
    spec["roles"]["prefill"].setdefault("flags", {})["--reasoning-parser"] = HF
    spec["roles"]["decode"]["env"] = {"VLLM_BAR": f"key={SK}"}
    errors = errors_of(spec)
    # the flag's path is its key as written
    assert set(errors) == {"spec.roles.prefill.flags.--reasoning-parser", "spec.roles.decode.env.VLLM_BAR"}
    assert errors["spec.roles.prefill.flags.--reasoning-parser"] == [
        "spec.roles.prefill.flags.--reasoning-parser looks like a Hugging Face token (hf_…(39 chars)): store it as a "
        "secret (admin → Secrets, or POST /api/secrets/) and reference it from spec.secrets (an environment variable "
        'named like a credential, e.g. {"HF_TOKEN": "<secret name>"}); a plain value is stored and shown in clear'
    ]
    assert "OpenAI-style API key (sk-…(32 chars))" in errors["spec.roles.decode.env.VLLM_BAR"][0]
    assert HF not in json.dumps(errors) and SK not in json.dumps(errors)


@pytest.mark.parametrize("flag", ["--token", "--hf-token", "--password", "--secret-key", "--auth-token", "api_key"])
def test_it_refuses_a_flag_named_like_a_secret_whatever_its_value(flag):
    spec = seed_pd_spec()
    spec["roles"]["prefill"].setdefault("flags", {})[flag] = "plain-looking-value"
    errors = errors_of(spec)
    name = flag.lstrip("-")
    [message] = errors[f"spec.roles.prefill.flags.{flag}"]  # at the key as written
    # the path is the key, said once: never repeated inside the message
    assert message.startswith(f"--{name} carries a secret, so its value is not taken here")
    assert "spec.secrets" in message and "plain-looking-value" not in message


def test_the_engines_api_key_flag_still_points_at_spec_secrets():
    spec = seed_pd_spec()
    spec["roles"]["prefill"].setdefault("flags", {})["--api-key"] = HF
    errors = errors_of(spec)
    assert errors == {"spec.roles.prefill.flags.--api-key": [
        "spec.roles.prefill.flags.--api-key looks like a Hugging Face token (hf_…(39 chars)): store it as a secret "
        "(admin → Secrets, or POST /api/secrets/) and reference it from spec.secrets (an environment variable named "
        'like a credential, e.g. {"HF_TOKEN": "<secret name>"}); a plain value is stored and shown in clear'
    ]}


def test_ordinary_values_and_flags_are_still_taken():
    spec = seed_pd_spec()
    spec["roles"]["prefill"].setdefault("flags", {})["--max-total-tokens"] = 4096
    spec["env"] = {"SGLANG_NOTE": "sk-short", "TOKENIZERS_PARALLELISM": "false"}
    out = recipe_validate(engine="sglang", topology="pd", spec=spec, node=seed_node_facts_example())
    assert out["env"] == {"SGLANG_NOTE": "sk-short", "TOKENIZERS_PARALLELISM": "false"}
    assert out["roles"]["prefill"]["flags"]["max-total-tokens"] == 4096


def test_the_redactor_masks_every_format_in_log_text():
    line = " ".join(CREDENTIALS) + "\nMIIEowIBAAKCAQEAtail0123456789abcdef\n-----END RSA PRIVATE KEY----- done"
    masked = redact_text(f"argv: --flag {line}")
    assert masked == "argv: --flag " + " ".join([REDACTED] * (len(CREDENTIALS) - 1)) + f" {REDACTED} done"
    assert credential_mask(f"--api-key {HF}") == "--api-key hf_…(39 chars)"


@pytest.mark.django_db
def test_a_stored_recipe_holding_one_is_shown_shortened_by_the_api_and_pages(operator_api, client, operator):
    node = seed_node_create()
    spec = seed_pd_spec()
    spec["env"] = {"SGLANG_FOO": HF}
    recipe = recipe_row_create(node=node, name="old-leaky", spec=spec, engine="sglang", topology="pd")
    body = operator_api.get(f"/api/recipes/{recipe.pk}/").json()
    assert body["spec"]["env"] == {"SGLANG_FOO": "hf_…(39 chars)"}
    version = operator_api.get(f"/api/recipes/{recipe.pk}/versions/1/")
    if version.status_code == 200:
        assert version.json()["spec"]["env"] == {"SGLANG_FOO": "hf_…(39 chars)"}
    assert HF not in spec_pretty(recipe.spec) and "hf_…(39 chars)" in spec_pretty(recipe.spec)
    client.force_login(operator)
    for url in (f"/recipes/{recipe.pk}/", f"/recipes/{recipe.pk}/edit/", f"/recipes/{recipe.pk}/dry-run/"):
        page = client.get(url)
        assert page.status_code == 200, url
        assert HF not in page.content.decode(), url
    assert "hf_…(39 chars)" in client.get(f"/recipes/{recipe.pk}/").content.decode()
    # The dry run refuses it now, at its path, without the value.
    dry = operator_api.get(f"/api/recipes/{recipe.pk}/dry-run/")
    assert dry.status_code == 400
    assert HF not in dry.content.decode()
    assert "hf_…(39 chars)" in json.dumps(dry.json(), ensure_ascii=False)


@pytest.mark.parametrize("value,said", [
    ("sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2", "looks like an OpenAI-style API key (sk-…(27 chars))"),
    ("AKIA" + "ABCDEFGHIJKLMNOP", "looks like an AWS access key id (AKIA…(20 chars))"),
    ("hf_" + "abcdefghijklmnopqrstuvwxyz0123456789", "looks like a Hugging Face token (hf_…(39 chars))"),
])
def test_the_credential_kind_is_said_with_its_article(value, said):
    spec = seed_pd_spec()
    spec["env"] = {"SGLANG_FOO": value}
    [message] = errors_of(spec)["spec.env.SGLANG_FOO"]
    assert message.startswith(f"spec.env.SGLANG_FOO {said}: "), message
