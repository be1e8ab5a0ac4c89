"""The token endpoint names a field given twice with the messages every endpoint shares
(:func:`controlplane.api.request_body`): a username by its values as sent (a file by its name), a
password by its count alone, in a JSON, form-encoded or multipart body alike."""
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

TOKEN = "/api/auth/token/"
SECRET = "correct-horse-battery"


def test_a_multipart_username_given_as_text_and_as_a_file_is_named_with_the_files_name(viewer):
    upload = SimpleUploadedFile("who.txt", b"vera-viewer", content_type="text/plain")
    answer = APIClient().post(TOKEN, {"username": ["nobody", upload], "password": SECRET}, format="multipart")
    assert answer.status_code == 400
    assert answer.json() == {"username": ["is given 2 times (nobody, who.txt): give it once"]}


def test_a_multipart_password_given_twice_is_named_by_its_count_alone(viewer):
    upload = SimpleUploadedFile("pw.txt", SECRET.encode(), content_type="text/plain")
    answer = APIClient().post(TOKEN, {"username": "vera-viewer", "password": ["x", upload]}, format="multipart")
    assert answer.status_code == 400
    assert answer.json() == {"password": ["is given 2 times: give it once"]}
    assert "pw.txt" not in answer.content.decode()


def test_the_same_messages_in_a_form_and_a_json_body(viewer):
    form = APIClient().post(TOKEN, "username=a&username=b&password=x&password=y",
                            content_type="application/x-www-form-urlencoded")
    assert form.status_code == 400 and form.json() == {"username": ["is given 2 times (a, b): give it once"],
                                                       "password": ["is given 2 times: give it once"]}
    body = APIClient().post(TOKEN, '{"username": "a", "username": "b", "password": "x", "password": "y"}',
                            content_type="application/json")
    assert body.status_code == 400 and body.json() == {"username": ['is given 2 times ("a", "b"): give it once'],
                                                       "password": ["is given 2 times: give it once"]}
    ok = APIClient().post(TOKEN, {"username": "vera-viewer", "password": SECRET}, format="multipart")
    assert ok.status_code == 200 and len(ok.json()["token"]) == 40
