"""A field given more than once is refused wherever a client can write one, as a key given twice
in a JSON body is: in a form-encoded or multipart API body (``name=a&name=b``, a file field
too), named at its name beside every other problem of the body (``is given 2 times (a, b): give
it once``; a password or a secret's value by its count alone), and in a frame of the live
websocket (closed with ``CLOSE_BAD_REQUEST``, ``key 'count' is given 2 times: give it once``).
Neither value is taken, where DRF's form parsers and Python's ``json`` would keep the last."""
from __future__ import annotations

import uuid

import pytest
from asgiref.sync import sync_to_async
from django.core.files.uploadedfile import SimpleUploadedFile
from django.http import QueryDict
from django.test import RequestFactory
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.test import APIClient

from benchmarks.models import BenchmarkRun
from controlplane.consumers import CLOSE_BAD_REQUEST
from controlplane.drf_defaults import body_errors, json_loads, repeated_key_errors
from controlplane.realtime import abroadcast, node_group
from controlplane.tests.test_live_consumer import _next_broadcast, _open, _sample
from deployments.examples import example_recipe, local_node_facts_example
from deployments.models import Deployment, Secret
from deployments.nodes import node_register
from deployments.services import recipe_create
from deployments.tests.factories import cpu_node_create, recipe_row_create

FORM = "application/x-www-form-urlencoded"
PASSWORD = "correct-horse-battery"


def post_form(api, url: str, body: str, method: str = "POST"):
    """Send ``body`` (form-encoded text, as written) to ``url``."""
    return api.generic(method, url, body, content_type=FORM)


# --- the rule -------------------------------------------------------------------------------------


def test_a_form_body_names_each_field_given_twice_with_its_values_as_sent():
    form = QueryDict("name=a&name=b&size=1&tag=x&tag=y&tag=z&csrfmiddlewaretoken=t1&csrfmiddlewaretoken=t2")

    assert body_errors(form) == {"name": ["is given 2 times (a, b): give it once"],
                                 "tag": ["is given 3 times (x, y, z): give it once"]}


def test_a_password_or_a_secret_value_given_twice_is_named_by_its_count_alone():
    assert body_errors(QueryDict("password=first-secret&password=second-secret&value=v1&value=v2")) == {
        "password": ["is given 2 times: give it once"], "value": ["is given 2 times: give it once"]}
    assert body_errors(json_loads('{"a": {"password": "p1", "password": "p2"}}')) == {
        "a.password": ["is given 2 times: give it once"]}
    assert repeated_key_errors(json_loads('{"count": 1, "count": 5}'), values_shown=False) == {
        "count": ["is given 2 times: give it once"]}


# --- form-encoded and multipart API bodies ------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("url, body, key", [
    ("/api/secrets/", "name=a&description=d&value=abcdefghijklmnop&name=c", "name"),
    ("/api/kernel-jobs/", "package=p&node=n&node=m", "node"),
    ("/api/sweeps/", "deployment=1&deployment=2&grid=%7B%7D", "deployment"),
    ("/api/deployments/", "recipe=1&recipe=2", "recipe"),
    ("/api/recipes/", "name=a&name=b", "name"),
    ("/api/runs/import/", "text=x&text=y", "text"),
    ("/api/auth/token/", "username=vera-viewer&password=x&username=alice-admin", "username"),
])
@pytest.mark.parametrize("fmt", ["form", "multipart"])
def test_every_form_body_of_the_api_refuses_a_repeated_field(admin_api, url, body, key, fmt):
    if fmt == "form":
        response = post_form(admin_api, url, body)
    else:
        response = admin_api.post(url, dict(QueryDict(body).lists()), format="multipart")

    assert response.status_code == 400, response.content
    [message] = response.json()[key]
    values = QueryDict(body).getlist(key)
    assert message == f"is given 2 times ({', '.join(values)}): give it once"


@pytest.mark.django_db
def test_a_secret_given_twice_in_a_form_is_named_with_every_other_problem_and_nothing_is_stored(admin_api):
    body = "name=form-secret&name=other-secret&value=abcdefghijklmnop&zzz=1"

    response = post_form(admin_api, "/api/secrets/", body)

    assert response.status_code == 400
    assert response.json() == {
        "name": ["is given 2 times (form-secret, other-secret): give it once"],
        "zzz": ["unknown field 'zzz'; allowed: name, description, value"],
    }
    assert not Secret.objects.exists()


@pytest.mark.django_db
def test_a_secret_value_given_twice_is_never_shown_back(admin_api):
    response = post_form(admin_api, "/api/secrets/", "name=twice&value=first-value-1234&value=second-value-5678")

    assert response.status_code == 400
    assert response.json() == {"value": ["is given 2 times: give it once"]}
    assert "value-1234" not in response.content.decode() and "value-5678" not in response.content.decode()
    assert not Secret.objects.exists()


@pytest.mark.django_db
def test_a_recipe_edit_that_gives_a_field_twice_in_a_form_changes_nothing(operator_api, operator):
    node = node_register(facts=local_node_facts_example(cpu_count=4))
    ex = example_recipe("local-sim-single")
    recipe = recipe_create(user=operator, name=ex["name"], description=ex["description"], engine=ex["engine"],
                           topology=ex["topology"], node=node, spec=ex["spec"])
    version = recipe.version

    response = post_form(operator_api, f"/api/recipes/{recipe.pk}/", "description=x&description=y&zzz=1",
                         method="PATCH")

    assert response.status_code == 400
    assert response.json() == {
        "description": ["is given 2 times (x, y): give it once"],
        "zzz": ["unknown field 'zzz'; allowed: name, description, engine, topology, node, spec, change_reason, "
                "expected_version"],
    }
    recipe.refresh_from_db()
    assert (recipe.description, recipe.version) == (ex["description"], version)
    # the same edit with the field once goes through
    once = post_form(operator_api, f"/api/recipes/{recipe.pk}/", "description=y", method="PATCH")
    assert once.status_code == 200 and once.json()["description"] == "y"


@pytest.mark.django_db
def test_a_deploy_form_that_names_its_recipe_twice_deploys_nothing(operator_api):
    node = cpu_node_create(name="formnode")
    first, second = recipe_row_create(node=node, name="first"), recipe_row_create(node=node, name="second")

    response = post_form(operator_api, "/api/deployments/", f"recipe={first.pk}&recipe={second.pk}")

    assert response.status_code == 400
    assert response.json() == {"recipe": [f"is given 2 times ({first.pk}, {second.pk}): give it once"]}
    assert not Deployment.objects.exists()


@pytest.mark.django_db
def test_a_kernel_job_form_names_a_repeated_node_beside_an_unknown_package(operator_api):
    response = post_form(operator_api, "/api/kernel-jobs/", "package=no-such&node=a&node=b")

    assert response.status_code == 400
    assert response.json() == {"node": ["is given 2 times (a, b): give it once"],
                               "package": ["no registered kernel package named 'no-such'"]}


@pytest.mark.django_db
def test_a_file_given_twice_in_a_multipart_import_imports_nothing(operator_api):
    uploads = [SimpleUploadedFile("a.json", b"{}"), SimpleUploadedFile("b.json", b"[]")]

    response = operator_api.post("/api/runs/import/", {"file": uploads, "allow_duplicate": ["true", "false"]},
                                 format="multipart")

    assert response.status_code == 400, response.content
    assert response.json() == {"file": ["is given 2 times (a.json, b.json): give it once"],
                               "allow_duplicate": ["is given 2 times (true, false): give it once"]}
    assert not BenchmarkRun.objects.exists()


def test_the_multipart_parser_keeps_each_file_of_a_field_for_the_check_to_count():
    boundary = "BoUnDaRy"
    part = ('--{b}\r\nContent-Disposition: form-data; name="file"; filename="{n}"\r\n'
            "Content-Type: application/json\r\n\r\n{{}}\r\n")
    raw = (part.format(b=boundary, n="a.json") + part.format(b=boundary, n="b.json") + f"--{boundary}--\r\n").encode()
    request = Request(RequestFactory().generic("POST", "/api/runs/import/", raw,
                                               content_type=f"multipart/form-data; boundary={boundary}"),
                      parsers=[MultiPartParser()])

    assert body_errors(request.data) == {"file": ["is given 2 times (a.json, b.json): give it once"]}


@pytest.mark.django_db
def test_a_browser_form_s_tokens_given_twice_are_left_alone(admin_api):
    response = post_form(admin_api, "/api/secrets/",
                         "csrfmiddlewaretoken=t1&csrfmiddlewaretoken=t2&name=form-secret&value=abcdefghijklmnop")

    assert response.status_code == 201, response.content
    assert Secret.objects.get(name="form-secret").plaintext() == "abcdefghijklmnop"


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", ["form", "json"])
def test_a_password_given_twice_gets_no_token_and_is_never_shown_back(viewer, fmt):
    client = APIClient()
    if fmt == "form":
        answer = client.post("/api/auth/token/", f"username=vera-viewer&password=wrong-one&password={PASSWORD}",
                             content_type=FORM)
    else:
        answer = client.post("/api/auth/token/",
                             '{"username": "vera-viewer", "password": "wrong-one", "password": "%s", "zzz": 1}'
                             % PASSWORD, content_type="application/json")

    assert answer.status_code == 400
    expected = {"password": ["is given 2 times: give it once"]}
    if fmt == "json":   # named beside the body's other problems
        expected["zzz"] = ["unknown field 'zzz'; allowed: username, password"]
    assert answer.json() == expected
    assert PASSWORD not in answer.content.decode() and "wrong-one" not in answer.content.decode()
    # the same password once gets the token
    good = client.post("/api/auth/token/", f"username=vera-viewer&password={PASSWORD}", content_type=FORM)
    assert good.status_code == 200 and good.json()["token"]


# --- the live websocket's frames ---------------------------------------------------------------


async def _node(prefix: str):
    """A node with a name of its own: tests running at the same time never share its group."""
    return await sync_to_async(cpu_node_create)(name=f"{prefix}-{uuid.uuid4().hex[:10]}")


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_an_ack_that_gives_its_count_twice_closes_the_socket_with_a_reason_naming_it(viewer, settings):
    settings.CEILING_REALTIME_MIN_INTERVAL_S = 0.0
    node = await _node("dupkey")
    group = node_group(node.name)
    ws, _ = await _open(viewer, [group])
    for i in range(5):   # both counts would be a valid ack
        assert await abroadcast(group, "node.sample", _sample(node.name, i))
        await _next_broadcast(ws)

    await ws.send_to(text_data='{"action": "ack", "count": 1, "count": 5}')

    error = await ws.receive_json_from(timeout=5)
    assert error == {"type": "live.error", "code": CLOSE_BAD_REQUEST,
                     "error": "key 'count' is given 2 times: give it once"}
    closed = await ws.receive_output(timeout=5)
    assert (closed["code"], closed.get("reason")) == (CLOSE_BAD_REQUEST, "key 'count' is given 2 times: give it once")


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_frame_that_repeats_its_action_is_refused_before_it_is_dispatched(viewer):
    node = await _node("dupaction")
    ws, _ = await _open(viewer, [node_group(node.name)])

    await ws.send_to(text_data='{"action": "ping", "action": "ping", "x": {"a": 1, "a": 2}}')

    error = await ws.receive_json_from(timeout=5)   # no live.pong first
    assert error["type"] == "live.error" and error["code"] == CLOSE_BAD_REQUEST
    assert error["error"] == ("key 'action' is given 2 times: give it once; "
                              "key 'x.a' is given 2 times: give it once")
    assert (await ws.receive_output(timeout=5))["code"] == CLOSE_BAD_REQUEST
