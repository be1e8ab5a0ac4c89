"""Sign-in limits and token revocation: failed sign-ins on the login pages are limited per client
address, the token endpoint's limit cannot be dodged with a forged ``X-Forwarded-For``, and a
password change or deactivation revokes the user's API token. Real views through Django's test
client, the real cache."""
from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from controlplane import login_throttle

PASSWORD = "correct-horse-battery"  # the personas' password (conftest)


@pytest.fixture(autouse=True)
def _empty_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.mark.parametrize("url", ["/login/", "/admin/login/"])
def test_failed_sign_ins_are_limited_per_address_and_right_ones_never_count(url, operator):
    client = Client(REMOTE_ADDR="10.1.2.3")
    for _ in range(login_throttle.MAX_FAILURES * 2):  # right passwords do not use up the allowance
        assert client.post(url, {"username": operator.username, "password": PASSWORD}).status_code == 302
        client.logout()
    for attempt in range(login_throttle.MAX_FAILURES):
        response = client.post(url, {"username": operator.username, "password": "wrong"})
        assert response.status_code == 200, attempt  # the form again, with its error
    refused = client.post(url, {"username": operator.username, "password": PASSWORD})
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert "Too many failed sign-ins from this address (20 in the last 60 s): try again in" in refused.content.decode()
    # A forged X-Forwarded-For is not another address; a real other address is.
    forged = client.post(url, {"username": operator.username, "password": PASSWORD}, HTTP_X_FORWARDED_FOR="10.9.9.9")
    assert forged.status_code == 429
    other = Client(REMOTE_ADDR="10.1.2.4")
    assert other.post(url, {"username": operator.username, "password": PASSWORD}).status_code == 302
    assert client.get(url).status_code == 200  # the page itself still shows


def test_the_token_limit_cannot_be_dodged_with_a_forged_forwarded_for(operator):
    api = APIClient(REMOTE_ADDR="10.2.3.4")
    answers = [api.post("/api/auth/token/", {"username": operator.username, "password": "wrong"}, format="json",
                        HTTP_X_FORWARDED_FOR=f"10.0.0.{i}").status_code for i in range(25)]
    assert answers[:20] == [400] * 20
    assert set(answers[20:]) == {429}


@pytest.mark.django_db
def test_a_password_change_or_deactivation_revokes_the_api_token(operator, viewer):
    api = APIClient()
    key = api.post("/api/auth/token/", {"username": operator.username, "password": PASSWORD}, format="json").json()["token"]
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert api.get("/api/recipes/").status_code == 200
    operator.first_name = "Oscar"  # an edit that is neither: the token stays
    operator.save()
    assert api.get("/api/recipes/").status_code == 200

    operator.set_password("a-new-password-42")
    operator.save()

    assert api.get("/api/recipes/").status_code == 401
    assert not Token.objects.filter(user=operator).exists()
    fresh = APIClient().post("/api/auth/token/", {"username": operator.username, "password": "a-new-password-42"},
                             format="json").json()["token"]
    assert fresh != key

    viewer_token = Token.objects.create(user=viewer)
    viewer.is_active = False
    viewer.save()
    assert not Token.objects.filter(pk=viewer_token.pk).exists()


@pytest.mark.django_db
def test_a_rehash_of_the_same_password_at_sign_in_keeps_the_api_token(operator, settings):
    # The stored hash is of an older hasher: Django verifies it, then stores a new hash of the same
    # password with the preferred one. The password did not change, so the token stays.
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher",
                                 "django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    token = Token.objects.create(user=operator)
    old_hash = PBKDF2PasswordHasher().encode(PASSWORD, "somesalt", iterations=1000)
    type(operator).objects.filter(pk=operator.pk).update(password=old_hash)
    assert Client().post("/login/", {"username": operator.username, "password": PASSWORD}).status_code == 302
    operator.refresh_from_db()
    assert operator.password.startswith("md5$")  # re-hashed at the sign-in
    assert Token.objects.filter(pk=token.pk).exists()
    # a real change still revokes it, and so does making the password unusable
    operator.set_password("another-password-7")
    operator.save()
    assert not Token.objects.filter(pk=token.pk).exists()
    token = Token.objects.create(user=operator)
    operator.set_unusable_password()
    operator.save()
    assert not Token.objects.filter(pk=token.pk).exists()
