"""A text refused for one problem is refused with one message: a NUL or a lone surrogate gets the
product's own message (what and where) without Django's and DRF's generic "Null characters are not
allowed." / "Surrogate characters are not allowed: U+D800." beside it, and a description over its
length gets the field's limit ("Use at most 4000 characters; got 9000.") without the spec strings'
8192-character rule beside it."""
from __future__ import annotations

import json

import pytest

from deployments.examples import example_recipe
from deployments.models import Secret
from deployments.tests.factories import secret_api_store, seed_node_create

pytestmark = pytest.mark.django_db

NUL = '"a\\u0000b"'
SURROGATE = '"a\\ud800b"'
LONG = json.dumps("x" * 9000)


@pytest.fixture
def urls(admin_api, settings) -> dict[str, str]:
    settings.CEILING_MODEL_ROOTS = ["/models"]
    ex = example_recipe("seed-v4-flash-pd")
    made = admin_api.post("/api/recipes/", {"name": "r1", "engine": ex["engine"], "topology": ex["topology"],
                                            "node": seed_node_create().name, "spec": ex["spec"]}, format="json")
    assert made.status_code == 201, made.content
    secret_api_store(admin_api, name="s1", value="a-long-enough-value-1234")
    return {"recipe": f"/api/recipes/{made.json()['id']}/", "secret": f"/api/secrets/{Secret.objects.get(name='s1').pk}/"}


@pytest.mark.parametrize(("target", "key", "raw", "said"), [
    ("recipe", "description", NUL, ["Must not contain NUL characters."]),
    ("recipe", "description", SURROGATE, ["Must be valid Unicode text."]),
    ("recipe", "description", LONG, ["Use at most 4000 characters; got 9000."]),
    ("recipe", "change_reason", SURROGATE, ["Surrogate characters are not allowed: U+D800."]),
    ("recipe", "name", NUL, ["Use 1-63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit; "
                             "got 'a<U+0000>b'."]),
    ("secret", "description", NUL, ["Must not contain control characters other than tab, newline and carriage "
                                    "return: U+0000 (NUL) at character 2 could change what a terminal or log "
                                    "printing the text shows."]),
    ("secret", "description", SURROGATE, ["Surrogate characters are not allowed: U+D800."]),
])
def test_one_problem_one_message(admin_api, urls, target, key, raw, said):
    answer = admin_api.patch(urls[target], f'{{"{key}": {raw}}}', content_type="application/json")
    assert answer.status_code == 400, answer.content
    assert answer.json() == {key: said}
