"""REST re-sync endpoints of the live telemetry: ``/api/nodes/<name>/telemetry/`` and
``/api/deployments/<id>/telemetry/`` (shapes, windows, the last messages from real Redis, and
who may read them)."""
from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta, timezone as dt_timezone

import pytest
from django.utils import timezone

from controlplane import realtime
from deployments.models import DeploymentTelemetry, NodeTelemetry
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create


@pytest.fixture(autouse=True)
def _no_rate_bound(settings):
    settings.CEILING_REALTIME_MIN_INTERVAL_S = 0.0


@pytest.fixture
def node(db):
    return cpu_node_create(name=f"api-{uuid.uuid4().hex[:8]}")


def _at(unix_s: float) -> datetime:
    return datetime.fromtimestamp(int(unix_s), tz=dt_timezone.utc)


def test_it_serves_a_nodes_last_sample_seq_and_history(viewer_api, node):
    now = time.time()
    for ago in (900, 120, 60):  # 15 minutes ago falls outside the default 10 minute window
        NodeTelemetry.objects.create(node=node, at=_at(now - ago), data={
            "gpus": {"0": {"memory_used_bytes": ago, "utilization_pct": 5, "power_w": 80.0, "temperature_c": 40}},
            "host_cpu_pct": 12.5})
    group = realtime.node_group(node.name)
    assert realtime.broadcast(group, "node.sample", {"node": node.name, "t": now, "gpus": []})
    body = viewer_api.get(f"/api/nodes/{node.name}/telemetry/").json()
    assert body["group"] == group and body["seq"] == realtime.current_seq(group) >= 1
    assert body["latest"]["node.sample"]["data"] == {"node": node.name, "t": now, "gpus": []}
    assert body["latest"]["node.sample"]["seq"] == body["seq"]
    history = body["history"]
    assert history["t"] == [float(int(now - 120)), float(int(now - 60))]
    assert history["gpus"]["0"] == {"memory_used_bytes": [120, 60], "utilization_pct": [5, 5],
                                    "power_w": [80.0, 80.0], "temperature_c": [40, 40]}
    assert history["host_cpu_pct"] == [12.5, 12.5]


def test_it_filters_node_history_by_window_and_fields(viewer_api, node):
    base = time.time() - 3000
    for s in range(5):
        NodeTelemetry.objects.create(node=node, at=_at(base + s), data={
            "gpus": {"0": {"power_w": float(s), "utilization_pct": s}}, "host_cpu_pct": 1.0})
    body = viewer_api.get(f"/api/nodes/{node.name}/telemetry/",
                          {"since": int(base) + 1, "until": int(base) + 3, "fields": "power_w"}).json()
    assert body["history"]["t"] == [float(int(base) + s) for s in (1, 2, 3)]
    assert body["history"]["gpus"] == {"0": {"power_w": [1.0, 2.0, 3.0]}}
    assert body["latest"] == {"node.sample": None}  # nothing broadcast to this node's group


def test_it_answers_400_with_the_reason_for_bad_parameters(viewer_api, node):
    resp = viewer_api.get(f"/api/nodes/{node.name}/telemetry/", {"fields": "power_w,fan_rpm"})
    assert resp.status_code == 400
    assert "unknown field(s) fan_rpm" in resp.json()["fields"][0]
    resp = viewer_api.get(f"/api/nodes/{node.name}/telemetry/", {"since": "yesterday"})
    assert resp.status_code == 400 and "since" in resp.json()
    resp = viewer_api.get(f"/api/nodes/{node.name}/telemetry/", {"since": 20, "until": 10})
    assert resp.status_code == 400 and resp.json()["since"] == ["must not be after until"]


@pytest.mark.parametrize("query", [{"since": "inf"}, {"since": "1e400"}, {"until": "inf"}, {"since": "nan"},
                                   {"until": "-inf"}, {"since": "nan", "until": "nan"}])
def test_it_answers_400_on_since_or_until_for_non_finite_times(viewer_api, node, query):
    deployment = deployment_row_create(recipe=recipe_row_create(node=node))
    for url in (f"/api/nodes/{node.name}/telemetry/", f"/api/deployments/{deployment.pk}/telemetry/"):
        resp = viewer_api.get(url, query)
        assert resp.status_code == 400, (url, query, resp.status_code)
        body = resp.json()
        assert set(body) <= {"since", "until"} and body, body
        assert all(isinstance(m, str) and m for msgs in body.values() for m in msgs)


def test_it_answers_404_for_an_unknown_node(viewer_api, db):
    assert viewer_api.get("/api/nodes/no-such-node/telemetry/").status_code == 404


def test_it_serves_a_deployments_last_messages_and_history(viewer_api, node):
    deployment = deployment_row_create(recipe=recipe_row_create(node=node))
    process_id = deployment.processes.get().pk
    now = time.time()
    DeploymentTelemetry.objects.create(deployment=deployment, at=_at(now - 30), data={
        "status": "ready", "tok_s": 42.5,
        "processes": {str(process_id): {"gen_tok_s": 42.5, "running": 3.0, "queued": 1.0, "kv_usage": 0.25,
                                        "gpu_memory_bytes": 1024, "cpu_pct": 97.0}}})
    group = realtime.deployment_group(deployment.pk)
    realtime.broadcast(group, "deployment.sample", {"deployment_id": deployment.pk, "tok_s": 42.5})
    realtime.broadcast(group, "deployment.status", {"deployment_id": deployment.pk, "status": "ready",
                                                    "reason": "the 1 process is ready"}, force=True)
    body = viewer_api.get(f"/api/deployments/{deployment.pk}/telemetry/").json()
    assert body["group"] == group and body["seq"] == realtime.current_seq(group)
    assert body["latest"]["deployment.sample"]["data"]["tok_s"] == 42.5
    assert body["latest"]["deployment.status"]["data"]["status"] == "ready"
    assert body["history"]["t"] == [float(int(now - 30))] and body["history"]["tok_s"] == [42.5]
    assert body["history"]["processes"][str(process_id)] == {
        "gen_tok_s": [42.5], "running": [3.0], "queued": [1.0], "kv_usage": [0.25], "gpu_memory_bytes": [1024],
        "cpu_pct": [97.0]}


def test_it_shows_a_past_deployments_last_ten_minutes_by_default(viewer_api, node):
    deployment = deployment_row_create(recipe=recipe_row_create(node=node), status="stopped")
    ended = timezone.now() - timedelta(days=2)
    deployment.ended_at = ended
    deployment.save(update_fields=["ended_at"])
    for ago in (900, 300, 10):
        DeploymentTelemetry.objects.create(deployment=deployment, at=ended - timedelta(seconds=ago),
                                           data={"status": "ready", "tok_s": float(ago), "processes": {}})
    body = viewer_api.get(f"/api/deployments/{deployment.pk}/telemetry/").json()
    assert body["history"]["tok_s"] == [300.0, 10.0]
    assert set(body["latest"]) == {"deployment.sample", "deployment.status"}


@pytest.mark.parametrize("client, status", [("viewer_api", 200), ("operator_api", 200), ("admin_api", 200),
                                            ("outsider_api", 403), ("anon_api", 401)])
def test_it_lets_every_role_read_telemetry_and_nobody_else(request, node, client, status):
    api = request.getfixturevalue(client)
    deployment = deployment_row_create(recipe=recipe_row_create(node=node))
    assert api.get(f"/api/nodes/{node.name}/telemetry/").status_code == status
    assert api.get(f"/api/deployments/{deployment.pk}/telemetry/").status_code == status


def test_it_offers_no_write_on_the_telemetry_endpoints(admin_api, node):
    deployment = deployment_row_create(recipe=recipe_row_create(node=node))
    assert admin_api.post(f"/api/nodes/{node.name}/telemetry/", {}, format="json").status_code == 405
    assert admin_api.delete(f"/api/deployments/{deployment.pk}/telemetry/").status_code == 405


def test_it_documents_the_endpoints_in_the_schema(viewer_api):
    paths = viewer_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()["paths"]
    assert "/api/nodes/{id}/telemetry/" in paths and "/api/deployments/{id}/telemetry/" in paths
    # the node is named by name or id there, as on the node's own route
    (key,) = [p for p in paths["/api/nodes/{id}/telemetry/"]["get"]["parameters"] if p["in"] == "path"]
    assert key == [p for p in paths["/api/nodes/{id}/"]["get"]["parameters"] if p["in"] == "path"][0]


def test_a_long_window_is_thinned_by_averaging_runs_of_rows_read_in_chunks(node, django_assert_max_num_queries):
    from deployments.telemetry.selectors import telemetry_for_node

    base = int(time.time()) - 5000
    NodeTelemetry.objects.bulk_create([NodeTelemetry(node=node, at=_at(base + s), data={
        "gpus": {"0": {"power_w": float(s)}, **({"1": {"power_w": 100.0}} if s >= 4 else {})},
        "host_cpu_pct": None if s == 1 else 10.0}) for s in range(7)])
    # 7 rows, at most 3 points: runs of 3 rows (0-2, 3-5, 6); a GPU first seen in row 4 is None before.
    history = telemetry_for_node(node_id=node.pk, since=base, until=base + 10, max_points=3,
                                 fields=["power_w", "host_cpu_pct"])
    assert history["resolution_s"] == 3
    assert history["t"] == [float(base), float(base + 3), float(base + 6)]
    assert history["gpus"] == {"0": {"power_w": [1.0, 4.0, 6.0]}, "1": {"power_w": [None, 100.0, 100.0]}}
    assert history["host_cpu_pct"] == [10.0, 10.0, 10.0]  # a None in a run is left out of its mean
    # Unthinned, the rows' own values come back as stored.
    history = telemetry_for_node(node_id=node.pk, since=base, until=base + 10, fields=["host_cpu_pct"])
    assert history["resolution_s"] == 1 and history["host_cpu_pct"] == [10.0, None, 10.0, 10.0, 10.0, 10.0, 10.0]
    # The rows are read in chunks (a count, then the rows): the whole window is never a list.
    with django_assert_max_num_queries(3):
        telemetry_for_node(node_id=node.pk, since=base, until=base + 10, max_points=2)


def test_a_window_longer_than_a_day_is_refused_with_how_to_page(viewer_api, node):
    deployment = deployment_row_create(recipe=recipe_row_create(node=node))
    until = time.time()
    for url in (f"/api/nodes/{node.name}/telemetry/", f"/api/deployments/{deployment.pk}/telemetry/"):
        response = viewer_api.get(url, {"since": 0})
        assert response.status_code == 400, url
        (message,) = response.json()["since"]
        assert "at most 86400 s (24 h) a request: ask for consecutive windows" in message
        ok = viewer_api.get(url, {"since": int(until) - 86_000, "until": int(until)})
        assert ok.status_code == 200, url
