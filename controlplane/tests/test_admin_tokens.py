"""Admin's API token pages: a token is a credential, so its list, change and delete pages show
only a short prefix of the key (never the whole of it), and an admin can still delete (revoke) it."""
from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from rest_framework.authtoken.models import Token


@pytest.mark.django_db
def test_it_never_shows_a_whole_key_in_admin(admin_client, operator, viewer) -> None:
    tokens = [Token.objects.create(user=operator), Token.objects.create(user=viewer)]
    pages = ["/admin/authtoken/tokenproxy/", "/admin/authtoken/tokenproxy/?q=" + operator.username]
    for token in tokens:
        pk = token.user_id  # the admin's URLs name a token by its user's id
        pages += [
            f"/admin/authtoken/tokenproxy/{pk}/change/",
            f"/admin/authtoken/tokenproxy/{pk}/history/",
            f"/admin/authtoken/tokenproxy/{pk}/delete/",
        ]
    pages += ["/admin/"]
    for url in pages:
        response = admin_client.get(url, follow=True)
        assert response.status_code == 200, url
        html = response.content.decode()
        for token in tokens:
            assert token.key not in html, url
    listing = admin_client.get("/admin/authtoken/tokenproxy/").content.decode()
    for token in tokens:
        assert f"{token.key[:4]}…" in listing
        assert token.user.username in listing


@pytest.mark.django_db
def test_it_lets_an_admin_revoke_a_token(admin_client, operator) -> None:
    token = Token.objects.create(user=operator)
    response = admin_client.post(f"/admin/authtoken/tokenproxy/{operator.pk}/delete/", {"post": "yes"}, follow=True)
    assert response.status_code == 200
    assert not Token.objects.filter(key=token.key).exists()
    html = response.content.decode()
    assert f"{token.key[:4]}…" in html  # the "was deleted" message names the prefix
    for url in ("/admin/", f"/admin/authtoken/tokenproxy/"):
        assert token.key not in admin_client.get(url).content.decode(), url
    entry = LogEntry.objects.get()
    assert (entry.object_repr, entry.object_id) == (f"{token.key[:4]}…", str(operator.pk))
