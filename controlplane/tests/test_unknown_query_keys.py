"""A query key an API read does not take is a 400 naming it and the keys taken, on every endpoint
(controlplane.drf_defaults.KnownQueryKeys): a misspelt or unsupported filter never answers with
everything. The keys each endpoint takes, paging's limit and offset and format keep working."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize("url, key, allowed", [
    ("/api/deployments/?node=nope", "node", "recipe, recipe_name, status, limit, offset, format"),
    ("/api/deployments/{deployment}/?bogus=1", "bogus", "format"),
    ("/api/deployments/{deployment}/events/?since=1", "since", "limit, offset, format"),
    ("/api/deployments/{deployment}/telemetry/?fields=power_w", "fields", "since, until, format"),
    ("/api/recipes/?engine=sim&nodes=cpu-box", "nodes", "engine, topology, node, limit, offset, format"),
    ("/api/recipes/{recipe}/?version=1", "version", "format"),
    ("/api/recipes/{recipe}/versions/?version=1", "version", "limit, offset, format"),
    ("/api/recipes/{recipe}/diff/?a=1&b=1&c=1", "c", "a, b, format"),
    ("/api/recipes/{recipe}/dry-run/?versoin=1", "versoin", "version, format"),
    ("/api/nodes/?gpu=0", "gpu", "limit, offset, format"),
    ("/api/nodes/{node}/telemetry/?field=power_w", "field", "since, until, fields, format"),
    ("/api/processes/?deployment=1&roles=decode", "roles", "deployment, role, limit, offset, format"),
    ("/api/sweeps/?deployment=1&engine=sim", "engine", "deployment, status, model, limit, offset, format"),
    ("/api/sweeps/{sweep}/analysis/?x=1", "x", "format"),
    ("/api/sweeps/{sweep}/export/?format=csv&rows=all", "rows", "format"),
    ("/api/runs/?sweep=1&deployment=1", "deployment", "sweep, source, status, order, limit, offset, format"),
    ("/api/runs/{run}/records/?page=2", "page", "offset, limit, format"),
    ("/api/runs/compare/?ids=8,9&bogus=1", "bogus", "ids, sweeps, baseline, format"),
    ("/api/kernel-packages/?name=toy", "name", "limit, offset, format"),
    ("/api/kernel-jobs/?compiler=nvcc", "compiler", "package, status, node, limit, offset, format"),
    ("/api/kernel-best/?cc=8.0&compiler=nvcc", "cc", "package, device, shape, batch, limit, offset, format"),
])
def test_a_key_the_endpoint_does_not_take_is_a_400_naming_it_and_the_keys_taken(viewer_api, rows, url, key, allowed):
    answer = viewer_api.get(url.format(**rows))
    assert answer.status_code == 400, (url, answer.content)
    assert answer.json()[key] == [f"unknown field '{key}'; allowed: {allowed}"]


def test_every_unknown_key_is_named_at_once(viewer_api, rows):
    answer = viewer_api.get("/api/kernel-best/?cc=8.0&compiler=nvcc&package=toy_attn")
    assert answer.status_code == 400
    allowed = "allowed: package, device, shape, batch, limit, offset, format"
    assert answer.json() == {"cc": [f"unknown field 'cc'; {allowed}"], "compiler": [f"unknown field 'compiler'; {allowed}"]}


@pytest.mark.parametrize("url", [
    "/api/deployments/?recipe={recipe}&status=ready&limit=5&offset=0&format=json",
    "/api/deployments/{deployment}/?format=json",
    "/api/deployments/{deployment}/events/?limit=1&offset=0",
    "/api/deployments/{deployment}/telemetry/?since=1&until=2",
    "/api/recipes/?engine=sim&topology=single&node=cpu-box&limit=1",
    "/api/recipes/{recipe}/versions/?limit=1&offset=0",
    "/api/recipes/{recipe}/diff/?a=1&b=1",
    "/api/nodes/{node}/telemetry/?since=1&until=2&fields=host_cpu_pct",
    "/api/processes/?deployment={deployment}&role=decode&limit=500",
    "/api/secrets/?limit=1",
    "/api/sweeps/?deployment={deployment}&status=done&model=m&offset=0",
    "/api/sweeps/{sweep}/export/?format=csv",
    "/api/runs/?sweep={sweep}&source=measured&status=done&order=-created_at&limit=2",
    "/api/runs/{run}/?format=api",
    "/api/kernel-packages/?limit=1&offset=0",
    "/api/kernel-jobs/?package=toy_attn&status=done&node=h200-box",
    "/api/kernel-best/?package=toy_attn&device=H200&shape=small&batch=1&limit=10",
])
def test_the_keys_an_endpoint_takes_pass(admin_api, rows, url):
    answer = admin_api.get(url.format(**rows))
    assert answer.status_code == 200, (url, answer.content)


def test_a_key_taken_is_judged_by_the_endpoint_itself(viewer_api, rows):
    # the stored recipe's spec is empty: its plan's problems, not the query's
    answer = viewer_api.get(f"/api/recipes/{rows['recipe']}/dry-run/?version=1")
    assert answer.status_code == 400 and "spec.roles" in answer.json() and "version" not in answer.json()


def test_the_role_is_checked_first(anon_api, outsider_api, operator_api, rows):
    assert anon_api.get("/api/deployments/?node=nope").status_code == 401
    assert outsider_api.get("/api/deployments/?node=nope").status_code == 403
    # a key the read does not take is named as unknown however often it is given (giving it once
    # would only meet that refusal); a key it takes given twice, as such, in the same 400
    unknown = ["unknown field 'node'; allowed: recipe, recipe_name, status, limit, offset, format"]
    answer = operator_api.get("/api/deployments/?node=a&node=b")
    assert answer.status_code == 400 and answer.json() == {"node": unknown}
    answer = operator_api.get("/api/deployments/?status=a&status=b&node=a&node=b")
    assert answer.status_code == 400 and answer.json() == {
        "node": unknown, "status": ["is given 2 times (a, b): give it once"]}
    # a path that is no endpoint stays a 404
    missing = operator_api.get("/api/nothing/?x=1")
    assert missing.status_code == 404 and missing.json() == {"detail": "no API endpoint at /api/nothing/"}
