"""Recipe versions: every change is a version with who, when and why; any two versions can be
diffed; a revert writes a new version equal in content to the old one. Through the API and
through the services the UI and admin call."""
from __future__ import annotations

import copy
import threading

import pytest
from django.db import connection

from controlplane.errors import Conflict, InvalidInput, NotFound
from deployments import services
from deployments.examples import example_recipe
from deployments.models import Recipe
from deployments.tests.factories import seed_node_create

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def model_roots(settings):
    settings.CEILING_MODEL_ROOTS = ["/models"]


@pytest.fixture
def node():
    return seed_node_create()


def seed_pd_payload() -> dict:
    example = example_recipe("seed-v4-flash-pd")
    return copy.deepcopy({k: example[k] for k in ("name", "description", "engine", "topology", "node", "spec")})


@pytest.fixture
def three_versions(operator_api, admin_api, node) -> int:
    """v1 created by the operator; v2 (operator) sets decode's mem-fraction-static to 0.8;
    v3 (admin) raises it to 0.88, moves decode's port and rewrites the description."""
    created = operator_api.post("/api/recipes/", {**seed_pd_payload(), "change_reason": "initial"}, format="json")
    assert created.status_code == 201, created.json()
    pk = created.json()["id"]

    v2 = seed_pd_payload()
    v2["spec"]["roles"]["decode"]["flags"] = {"mem-fraction-static": 0.8}
    response = operator_api.put(f"/api/recipes/{pk}/", {**v2, "change_reason": "leave room for CUDA graphs"}, format="json")
    assert response.status_code == 200, response.json()

    v3 = copy.deepcopy(v2)
    v3["spec"]["roles"]["decode"]["flags"]["mem-fraction-static"] = 0.88
    v3["spec"]["roles"]["decode"]["port"] = 30002
    v3["description"] = "decode tuned"
    response = admin_api.patch(
        f"/api/recipes/{pk}/",
        {"spec": v3["spec"], "description": v3["description"], "change_reason": "more KV cache"},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert response.json()["version"] == 3
    return pk


def test_it_lists_versions_with_who_when_and_why(viewer_api, three_versions):
    response = viewer_api.get(f"/api/recipes/{three_versions}/versions/")
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 3
    rows = [(r["version"], r["user"], r["change_reason"], r["change"]) for r in body["results"]]
    assert rows == [
        (3, "alice-admin", "more KV cache", "changed"),
        (2, "oscar-operator", "leave room for CUDA graphs", "changed"),
        (1, "oscar-operator", "initial", "created"),
    ]
    times = [r["at"] for r in body["results"]]
    assert times == sorted(times, reverse=True)
    assert all(t.endswith("Z") for t in times)


def test_it_records_user_and_reason_on_the_history_rows(three_versions):
    rows = list(Recipe.objects.get(pk=three_versions).history.order_by("history_date"))
    assert [(r.version, r.history_user.username, r.history_change_reason) for r in rows] == [
        (1, "oscar-operator", "initial"),
        (2, "oscar-operator", "leave room for CUDA graphs"),
        (3, "alice-admin", "more KV cache"),
    ]


def test_it_shows_one_version_with_its_content(viewer_api, three_versions):
    response = viewer_api.get(f"/api/recipes/{three_versions}/versions/2/")
    assert response.status_code == 200
    body = response.json()
    assert (body["version"], body["user"], body["node"], body["engine"]) == (2, "oscar-operator", "seed-8gpu", "sglang")
    assert body["spec"]["roles"]["decode"]["flags"] == {"mem-fraction-static": 0.8}
    assert viewer_api.get(f"/api/recipes/{three_versions}/versions/9/").status_code == 404
    assert viewer_api.get(f"/api/recipes/{three_versions}/versions/0/").status_code == 400


@pytest.mark.parametrize("number", ["0", "2147483648", "99999999999999", "9" * 30, "9" * 5000])
def test_a_version_number_out_of_range_is_a_400_naming_it_however_long(viewer_api, three_versions, number):
    """As ``/versions/0/`` and ``?version=`` of the dry-run: never a 404 "no API endpoint"."""
    response = viewer_api.get(f"/api/recipes/{three_versions}/versions/{number}/")
    assert response.status_code == 400, response.content
    shown = repr(number) if len(number) <= 40 else None
    (message,) = response.json()["version"]
    assert message.startswith("must be a whole number between 1 and 2147483647, got ")
    if shown:
        assert message.endswith(f"got {shown}")
    assert viewer_api.get(f"/api/recipes/{three_versions}/dry-run/", {"version": number}).json() == response.json()


def test_it_diffs_version_1_and_3_with_dotted_spec_paths(viewer_api, three_versions):
    response = viewer_api.get(f"/api/recipes/{three_versions}/diff/?a=1&b=3")
    assert response.status_code == 200
    body = response.json()
    assert (body["a"], body["b"]) == (1, 3)
    assert body["changes"] == [
        {
            "path": "description",
            "change": "changed",
            "old": seed_pd_payload()["description"],
            "new": "decode tuned",
        },
        {"path": "spec.roles.decode.flags.mem-fraction-static", "change": "added", "old": None, "new": 0.88},
        {"path": "spec.roles.decode.port", "change": "changed", "old": 30001, "new": 30002},
    ]


def test_it_diffs_backwards_and_a_version_with_itself(viewer_api, three_versions):
    back = viewer_api.get(f"/api/recipes/{three_versions}/diff/?a=3&b=2").json()["changes"]
    assert back == [
        {"path": "description", "change": "changed", "old": "decode tuned", "new": seed_pd_payload()["description"]},
        {"path": "spec.roles.decode.flags.mem-fraction-static", "change": "changed", "old": 0.88, "new": 0.8},
        {"path": "spec.roles.decode.port", "change": "changed", "old": 30002, "new": 30001},
    ]
    assert viewer_api.get(f"/api/recipes/{three_versions}/diff/?a=2&b=2").json()["changes"] == []


def test_it_answers_diff_parameter_errors_by_field(viewer_api, three_versions):
    missing = viewer_api.get(f"/api/recipes/{three_versions}/diff/")
    assert missing.status_code == 400
    assert set(missing.json()) == {"a", "b"}
    bad = viewer_api.get(f"/api/recipes/{three_versions}/diff/?a=one&b=-2")
    assert bad.status_code == 400
    assert set(bad.json()) == {"a", "b"}
    assert viewer_api.get(f"/api/recipes/{three_versions}/diff/?a=1&b=44").status_code == 404


def test_it_reverts_to_version_1_as_version_4(operator_api, three_versions):
    response = operator_api.post(f"/api/recipes/{three_versions}/revert/", {"version": 1}, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["version"] == 4
    v1 = operator_api.get(f"/api/recipes/{three_versions}/versions/1/").json()
    v4 = operator_api.get(f"/api/recipes/{three_versions}/versions/4/").json()
    content = ("name", "description", "engine", "topology", "node", "spec")
    assert {k: v4[k] for k in content} == {k: v1[k] for k in content}
    assert operator_api.get(f"/api/recipes/{three_versions}/diff/?a=1&b=4").json()["changes"] == []
    latest = operator_api.get(f"/api/recipes/{three_versions}/versions/").json()["results"][0]
    assert (latest["version"], latest["user"], latest["change_reason"]) == (4, "oscar-operator", "Reverted to version 1")


def test_a_revert_refuses_an_unknown_key_and_writes_no_version(operator_api, three_versions):
    response = operator_api.post(f"/api/recipes/{three_versions}/revert/", {"version": 1, "foo": 1}, format="json")
    assert response.status_code == 400
    assert response.json() == {"foo": ["unknown field 'foo'; allowed: version, expected_version, keep_name"]}
    assert operator_api.get(f"/api/recipes/{three_versions}/").json()["version"] == 3


def test_it_answers_revert_errors(operator_api, three_versions):
    assert operator_api.post(f"/api/recipes/{three_versions}/revert/", {"version": 12}, format="json").status_code == 404
    bad = operator_api.post(f"/api/recipes/{three_versions}/revert/", {"version": "first"}, format="json")
    assert bad.status_code == 400
    assert list(bad.json()) == ["version"]
    stale = operator_api.post(
        f"/api/recipes/{three_versions}/revert/", {"version": 1, "expected_version": 2}, format="json"
    )
    assert stale.status_code == 409
    assert Recipe.objects.get(pk=three_versions).version == 3


def test_it_writes_no_version_when_reverting_to_identical_content(operator_api, three_versions):
    response = operator_api.post(f"/api/recipes/{three_versions}/revert/", {"version": 3}, format="json")
    assert response.status_code == 200
    assert response.json()["version"] == 3
    assert Recipe.objects.get(pk=three_versions).history.count() == 3


def test_it_refuses_a_revert_that_no_longer_validates(operator_api, admin_api, node, settings):
    pk = operator_api.post("/api/recipes/", seed_pd_payload(), format="json").json()["id"]
    payload = seed_pd_payload()
    payload["spec"]["model"] = {"path": "/srv/weights/DeepSeek-V4-Flash"}
    settings.CEILING_MODEL_ROOTS = ["/models", "/srv/weights"]
    assert operator_api.put(f"/api/recipes/{pk}/", payload, format="json").status_code == 200
    settings.CEILING_MODEL_ROOTS = ["/srv/weights"]
    response = operator_api.post(f"/api/recipes/{pk}/revert/", {"version": 1}, format="json")
    assert response.status_code == 400
    assert "spec.model.path" in response.json()
    assert Recipe.objects.get(pk=pk).version == 2


def test_it_keeps_history_after_a_recipe_is_deleted(admin_api, three_versions):
    recipe = Recipe.objects.get(pk=three_versions)
    history = recipe.history
    assert admin_api.delete(f"/api/recipes/{three_versions}/").status_code == 204
    rows = list(history.model.objects.filter(id=three_versions).order_by("history_date"))
    assert [r.history_type for r in rows] == ["+", "~", "~", "-"]
    assert rows[-1].history_user.username == "alice-admin"


def test_only_an_admin_deletes_a_recipe(operator_api, viewer_api, admin_api, three_versions):
    for api, role in ((operator_api, "an operator"), (viewer_api, "a viewer")):
        refused = api.delete(f"/api/recipes/{three_versions}/")
        assert refused.status_code == 403
        assert refused.json() == {"detail": f"This needs the admin role; you are {role}."}
    assert operator_api.get(f"/api/recipes/{three_versions}/versions/").json()["count"] == 3
    assert admin_api.delete(f"/api/recipes/{three_versions}/").status_code == 204
    assert not Recipe.objects.filter(pk=three_versions).exists()


def test_a_deleted_recipes_versions_are_shown_by_admins_history_page_only(admin_api, admin_user, three_versions):
    from django.test import Client

    assert admin_api.delete(f"/api/recipes/{three_versions}/").status_code == 204
    for url in (f"/api/recipes/{three_versions}/", f"/api/recipes/{three_versions}/versions/",
                f"/api/recipes/{three_versions}/versions/1/", f"/api/recipes/{three_versions}/diff/?a=1&b=2"):
        assert admin_api.get(url).status_code == 404, url
    pages = Client()
    pages.force_login(admin_user)
    for url in (f"/recipes/{three_versions}/", f"/recipes/{three_versions}/history/"):
        assert pages.get(url).status_code == 404, url
    history = pages.get(f"/admin/deployments/recipe/{three_versions}/history/")
    assert history.status_code == 200
    html = history.content.decode()
    for reason in ("initial", "leave room for CUDA graphs", "more KV cache", "Deleted"):
        assert reason in html


# --- services, as the UI and admin call them -------------------------------------------------


def test_it_creates_updates_and_diffs_through_services(operator, node):
    data = seed_pd_payload()
    recipe = services.recipe_create(
        user=operator,
        name=data["name"],
        description=data["description"],
        engine=data["engine"],
        topology=data["topology"],
        node=node,
        spec=data["spec"],
    )
    spec = copy.deepcopy(recipe.spec)
    del spec["env"]["SGLANG_FP8_PAGED_MQA_LOGITS_TORCH"]
    updated = services.recipe_update(recipe=recipe, user=operator, spec=spec, change_reason="drop env")
    assert updated.version == 2
    assert services.recipe_diff(recipe=updated, a=1, b=2) == [
        {"path": "spec.env.SGLANG_FP8_PAGED_MQA_LOGITS_TORCH", "change": "removed", "old": "1", "new": None}
    ]
    got = services.recipe_version_get(recipe=updated, version=1)
    assert (got["name"], got["node"], got["user"], got["change_reason"]) == (
        "seed-v4-flash-pd",
        "seed-8gpu",
        "oscar-operator",
        "Created",
    )


def test_it_refuses_unknown_fields_and_stale_versions_in_recipe_update(operator, node):
    data = seed_pd_payload()
    recipe = services.recipe_create(user=operator, **{**data, "node": node})
    with pytest.raises(InvalidInput) as unknown:
        services.recipe_update(recipe=recipe, user=operator, version=7)
    assert unknown.value.errors == {"version": ["Not a recipe field."]}
    with pytest.raises(Conflict):
        services.recipe_update(recipe=recipe, user=operator, expected_version=5, description="x")
    with pytest.raises(NotFound):
        services.recipe_version_get(recipe=recipe, version=2)
    with pytest.raises(NotFound):
        services.recipe_version_get(recipe=recipe, version=2**40)


@pytest.mark.django_db(transaction=True)
def test_it_never_gives_two_concurrent_edits_the_same_version(operator, node):
    if connection.vendor != "postgresql":
        pytest.skip("row locks need PostgreSQL; SQLite serialises writers at the file level")
    data = seed_pd_payload()
    recipe = services.recipe_create(user=operator, **{**data, "node": node})
    barrier = threading.Barrier(4)
    failures: list[BaseException] = []

    def edit(i: int) -> None:
        try:
            barrier.wait()
            services.recipe_update(recipe=recipe, user=operator, description=f"edit {i}", change_reason=f"edit {i}")
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread below
            failures.append(exc)
        finally:
            # ``connection`` is per thread: this closes the worker thread's own connection.
            connection.close()

    threads = [threading.Thread(target=edit, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    recipe.refresh_from_db()
    assert recipe.version == 5
    assert sorted(recipe.history.values_list("version", flat=True)) == [1, 2, 3, 4, 5]
