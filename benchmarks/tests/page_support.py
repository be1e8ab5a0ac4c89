"""What the page tests share: a logged-in test client, a page's text, and its ``json_script`` data."""
from __future__ import annotations

import json
import re

from django.test import Client


def logged_in_client(user) -> Client:
    """A Django test client logged in as ``user``."""
    client = Client()
    client.force_login(user)
    return client


def page_text(user, url: str) -> str:
    """The page at ``url`` as ``user`` sees it; fails the test unless it answers 200."""
    response = logged_in_client(user).get(url)
    assert response.status_code == 200, response.content.decode()[:500]
    return response.content.decode()


def json_script(html: str, element_id: str) -> dict:
    """The JSON of the page's ``<script id=element_id type="application/json">`` (Django's
    ``json_script``); fails the test when the page has none."""
    match = re.search(rf'<script id="{re.escape(element_id)}" type="application/json">(.*?)</script>', html, re.S)
    assert match, f"no json_script #{element_id}"
    return json.loads(match.group(1))
