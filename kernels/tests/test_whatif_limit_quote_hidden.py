"""``?speedup=`` (API and page) and ``?limit=`` refusals quote a text-direction override as its
code point, ``'<U+202E>1'``, never raw or as Python's ``'\\u202e1'``."""
from __future__ import annotations

import html

import pytest
from django.test import Client

from controlplane.jsonsafe import json_spelled, shown_value

pytestmark = pytest.mark.django_db


def test_speedup_with_an_override_is_quoted_as_code_points(viewer_api, viewer, seed_pd_sweep):
    resp = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "speedup": "\u202e1"})
    assert resp.status_code == 400 and resp.json() == {"speedup": ["'<U+202E>1' is not a number"]}
    page = Client()
    page.force_login(viewer)
    body = page.get("/kernels/whatif/", {"sweep": seed_pd_sweep.pk, "speedup": "\u202e1"}).content.decode()
    assert "'<U+202E>1' is not a number." in html.unescape(body)  # the input keeps what was typed


def test_limit_with_an_override_is_quoted_as_code_points(viewer_api):
    resp = viewer_api.get("/api/recipes/", {"limit": "\u202e5"})
    assert resp.status_code == 400 and resp.json() == {"limit": ["must be a whole number >= 1, got '<U+202E>5'"]}


def test_json_spelled_shows_hidden_characters_as_code_points():
    assert json_spelled("h6\u202etest") == "'h6<U+202E>test'"
    assert json_spelled("a\u001b[31m\u0007\u2028\u00ad\ud800\t") == "'a<U+001B>[31m<U+0007><U+2028><U+00AD><U+D800><U+0009>'"
    assert json_spelled(["a\u202e", {"k\u2066": 1}]) == '["a<U+202E>", {"k<U+2066>": 1}]'
    assert json_spelled("it's") == '"it\'s"' and json_spelled("a\\b") == "'a\\\\b'"
    assert json_spelled("caf\u00e9 \u05e9") == "'caf\u00e9 \u05e9'"
    assert shown_value("1\u202e") == 'the string "1<U+202E>"'
