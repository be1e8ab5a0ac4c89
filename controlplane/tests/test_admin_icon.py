"""Admin pages link the same (empty) icon every other Ceiling page links, so a browser asks for no
``/favicon.ico``, which no route serves (a 404 in the console)."""
from __future__ import annotations

import pytest
from django.test import Client


@pytest.mark.django_db
def test_admin_pages_link_the_icon_every_other_page_has(admin_user) -> None:
    client = Client()
    client.force_login(admin_user)
    for url in ("/admin/", "/admin/benchmarks/benchmarksweep/", "/admin/login/"):
        html = client.get(url, follow=True).content.decode()
        assert '<link rel="icon" href="data:,">' in html, url
    home = client.get("/", follow=True).content.decode()
    assert '<link rel="icon" href="data:,">' in home
