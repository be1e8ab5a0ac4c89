"""Deployment pages: deploying from the recipe page (and the 409 for a second deploy), the
deployment list, one deployment's header, process table, timeline and live log tail, the log
download, and stop/cancel, seen by each persona."""
from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from deployments.choices import DeploymentStatus, ProcessStatus, Role
from deployments.examples import example_recipe
from deployments.models import Deployment, Node, ProcessEvent, Recipe, ServerProcess
from deployments.nodes import node_register, seed_node_facts
from deployments.services import deployment_create, recipe_create, secret_create

SECRET_VALUE = "s3cr3t-DeploymentViewsToken-0451"
POLL = 'hx-trigger="every 2s"'


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _html(response) -> str:
    return response.content.decode()


@pytest.fixture
def operator_client(operator) -> Client:
    return _client(operator)


@pytest.fixture
def viewer_client(viewer) -> Client:
    return _client(viewer)


@pytest.fixture
def seed_node(db):
    return node_register(facts=seed_node_facts())


@pytest.fixture
def seed_pd(seed_node, operator) -> Recipe:
    ex = example_recipe("seed-v4-flash-pd")
    return recipe_create(
        user=operator,
        name=ex["name"],
        description=ex["description"],
        engine=ex["engine"],
        topology=ex["topology"],
        node=seed_node,
        spec=ex["spec"],
    )


@pytest.fixture
def log_dir(settings, tmp_path) -> Path:
    root = tmp_path / "logs"
    root.mkdir()
    settings.CEILING_LOG_DIR = root
    return root


def _ready_deployment(recipe: Recipe, **process_fields) -> tuple[Deployment, ServerProcess]:
    """A ready PD-style deployment row with one decode process started 1 h 02 min 05 s ago, on
    a node whose agent heartbeats (so the page shows the state as live)."""
    now = timezone.now()
    Node.objects.filter(pk=recipe.node_id).update(agent_heartbeat_at=now, agent_stopped_at=None)
    deployment = Deployment.objects.create(
        recipe=recipe,
        recipe_version=recipe.version,
        spec_snapshot=recipe.spec,
        node=recipe.node,
        status=DeploymentStatus.READY,
        entry_url="http://127.0.0.1:8000",
        started_at=now - timedelta(seconds=3725),
        ready_at=now - timedelta(seconds=3600),
    )
    fields = {
        "deployment": deployment,
        "role": Role.DECODE,
        "status": ProcessStatus.READY,
        "pid": 31337,
        "pgid": 31337,
        "argv": ["/usr/bin/numactl", "--cpunodebind=1", "--membind=1", "python", "-m", "sglang.launch_server"],
        "env_redacted": {"CUDA_VISIBLE_DEVICES": "4,5,6,7"},
        "cpus": "32-63",
        "numa_node": 1,
        "mem_nodes": "1",
        "gpu_ids": [4, 5, 6, 7],
        "ports": {"http": 30001, "bootstrap": 8999},
        "pin_method": "numactl",
        "effective_cpus": "32-63",
        "effective_mems": "1",
        "pinning_verified": True,
        "health_url": "http://127.0.0.1:30001/health",
        "restart_count": 2,
        "started_at": now - timedelta(seconds=3725),
        "ready_at": now - timedelta(seconds=3600),
    }
    fields.update(process_fields)
    process = ServerProcess.objects.create(**fields)
    return deployment, process


# --- deploy -------------------------------------------------------------------------------


def test_it_deploys_for_an_operator_and_redirects_to_the_deployment(operator_client, operator, seed_pd):
    detail = _html(operator_client.get(reverse("deployments:recipe-detail", args=[seed_pd.pk])))
    assert f'action="{reverse("deployments:recipe-deploy", args=[seed_pd.pk])}"' in detail

    response = operator_client.post(reverse("deployments:recipe-deploy", args=[seed_pd.pk]))

    deployment = Deployment.objects.get(recipe=seed_pd)
    assert response.status_code == 302
    assert response["Location"] == reverse("deployments:deployment-detail", args=[deployment.pk])
    assert deployment.status == DeploymentStatus.PENDING
    assert deployment.recipe_version == 1
    assert deployment.created_by == operator
    page = _html(operator_client.get(response["Location"]))
    assert f"Deployment #{deployment.pk} of seed-v4-flash-pd v1 created." in page
    # No agent has ever heartbeated for the seed node: the page says what it waits for.
    assert "Waiting for node agent seed-8gpu (last heartbeat never)" in page
    assert "node.seed-8gpu" in page
    assert "Cancel deployment" in page
    # Updated by the page's poll and judged by the heartbeat's age (ceiling.js, as on the node
    # page): it reads as last seen while the poll fails.
    assert ('<span class="tag bad" data-agent-badge="seed-8gpu" data-stale-label="{text} (as last seen {at})">'
            'agent offline</span>') in page
    assert "created" in page and "oscar-operator deployed seed-v4-flash-pd v1 on node seed-8gpu" in page


def test_a_second_deploy_redirects_to_the_recipe_page_that_says_why_and_links_the_active_one(
        operator_client, operator, seed_pd):
    first = deployment_create(recipe=seed_pd, user=operator)
    recipe_url = reverse("deployments:recipe-detail", args=[seed_pd.pk])

    response = operator_client.post(reverse("deployments:recipe-deploy", args=[seed_pd.pk]))

    # Post/redirect/get: the browser lands on the recipe page, so a reload deploys nothing.
    assert response.status_code == 302
    assert response["Location"] == recipe_url
    html = _html(operator_client.get(recipe_url))
    assert (f"<li class=\"error\">Not deployed. Recipe &#x27;seed-v4-flash-pd&#x27; already has an active deployment "
            f"on node") in html
    assert f'Deployment <a href="{reverse("deployments:deployment-detail", args=[first.pk])}">#{first.pk}</a> ' \
           f"of this recipe is pending." in html
    # The message is shown once: a reload of the recipe page neither repeats it nor deploys.
    again = _html(operator_client.get(recipe_url))
    assert "Not deployed." not in again
    assert Deployment.objects.filter(recipe=seed_pd).count() == 1


def test_it_deploys_again_once_the_first_deployment_was_cancelled(operator_client, operator, seed_pd):
    first = deployment_create(recipe=seed_pd, user=operator)
    assert operator_client.post(reverse("deployments:deployment-stop", args=[first.pk])).status_code == 302
    first.refresh_from_db()
    assert first.status == DeploymentStatus.STOPPED

    response = operator_client.post(reverse("deployments:recipe-deploy", args=[seed_pd.pk]))

    second = Deployment.objects.exclude(pk=first.pk).get(recipe=seed_pd)
    assert response["Location"] == reverse("deployments:deployment-detail", args=[second.pk])


def test_it_shows_viewers_no_buttons_and_refuses_their_posts(viewer_client, operator, seed_pd):
    deployment = deployment_create(recipe=seed_pd, user=operator)
    recipe_page = _html(viewer_client.get(reverse("deployments:recipe-detail", args=[seed_pd.pk])))
    deployment_page = viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk]))

    assert deployment_page.status_code == 200
    assert reverse("deployments:recipe-deploy", args=[seed_pd.pk]) not in recipe_page
    assert reverse("deployments:deployment-stop", args=[deployment.pk]) not in _html(deployment_page)
    assert "Cancel deployment" not in _html(deployment_page)
    assert viewer_client.post(reverse("deployments:recipe-deploy", args=[seed_pd.pk])).status_code == 403
    assert viewer_client.post(reverse("deployments:deployment-stop", args=[deployment.pk])).status_code == 403
    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.PENDING
    assert Deployment.objects.filter(recipe=seed_pd).count() == 1


@pytest.mark.parametrize("name", ["deployment-detail", "deployment-live", "deployment-logs"])
def test_it_sends_anonymous_visitors_to_login(client, operator, seed_pd, name):
    deployment, _ = _ready_deployment(seed_pd)
    url = reverse(f"deployments:{name}", args=[deployment.pk])
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next={url}"


def test_it_refuses_signed_in_users_without_a_role(outsider, seed_pd):
    deployment, process = _ready_deployment(seed_pd)
    client = _client(outsider)
    assert client.get(reverse("deployments:deployment-detail", args=[deployment.pk])).status_code == 403
    assert client.get(reverse("deployments:process-log", args=[deployment.pk, process.pk])).status_code == 403


# --- the deployment page --------------------------------------------------------------------


def test_it_shows_each_process_with_pid_pinning_ports_and_the_timeline(viewer_client, seed_pd):
    deployment, process = _ready_deployment(seed_pd)
    base = timezone.now() - timedelta(minutes=70)
    ProcessEvent.objects.create(deployment=deployment, at=base, kind="created", message="oscar deployed it")
    ProcessEvent.objects.create(
        deployment=deployment, process=process, at=base + timedelta(seconds=5), kind="spawned", message="pid 31337"
    )
    ProcessEvent.objects.create(
        deployment=deployment, process=process, at=base + timedelta(seconds=90), kind="ready", message="health ok"
    )

    response = viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk]))

    assert response.status_code == 200
    html = _html(response)
    assert '<span class="tag ok" data-stale-label="{text} (as last seen {at})">ready</span>' in html
    assert '<td class="num mono">31337</td>' in html
    assert "CPUs 32-63" in html and "(32 CPUs)" in html
    assert "mem 1" in html and "(NUMA node 1)" in html
    assert "✓ verified" in html
    assert "4, 5, 6, 7" in html and "CUDA_VISIBLE_DEVICES=4,5,6,7" in html
    assert "bootstrap 8999<br>http 30001" in html
    assert '<td class="num">2</td>' in html  # restarts
    assert "1 h 02 min" in html  # uptime from started_at
    assert "http://127.0.0.1:8000" in html  # entry URL
    assert "http://127.0.0.1:30001/health" in html
    assert "healthy" in html
    assert f'href="{reverse("deployments:recipe-detail", args=[seed_pd.pk])}?version=1">seed-v4-flash-pd v1</a>' in html
    # Timeline: oldest first, newest last, with UTC ISO times.
    assert html.index("oscar deployed it") < html.index("pid 31337") < html.index("health ok")
    assert base.strftime("%Y-%m-%dT%H:%M:%SZ") in html
    # Live while not terminal: the header/table and the log panel poll.
    assert html.count(POLL) == 2
    assert reverse("deployments:deployment-live", args=[deployment.pk]) in html


def test_it_explains_a_failed_pinning(viewer_client, seed_pd):
    deployment, _ = _ready_deployment(seed_pd, effective_cpus="0-63", pinning_verified=False)
    html = _html(viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk])))
    assert "✗ CPUs 0-63 ≠ intended 32-63" in html
    assert "✓ verified" not in html


def test_it_shows_a_pending_restart_and_a_crash(viewer_client, seed_pd):
    deployment, _ = _ready_deployment(
        seed_pd,
        status=ProcessStatus.PENDING,
        next_restart_at=timezone.now() + timedelta(seconds=30),
        probe_detail="GET /health: connection refused",
    )
    html = _html(viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk])))
    assert "restart pending" in html
    # 30 s ahead, minus the render; shown in UTC to the second, the ISO value in the attribute
    assert re.search(r'restart due <time datetime="\d{4}-\d\d-\d\dT[\d:]{8}Z" title="[^"]+">\d{4}-\d\d-\d\d [\d:]{8} UTC</time> '
                     r'\(<span data-age data-age-of="[^"]+">in 2\d s</span>\)', html)
    assert "GET /health: connection refused" in html


def test_it_stops_polling_and_hides_stop_once_terminal(operator_client, seed_pd):
    deployment, process = _ready_deployment(seed_pd, status=ProcessStatus.EXITED, exit_code=0, ended_at=timezone.now())
    Deployment.objects.filter(pk=deployment.pk).update(
        status=DeploymentStatus.STOPPED, ended_at=timezone.now(), reason="stopped by oscar"
    )

    html = _html(operator_client.get(reverse("deployments:deployment-detail", args=[deployment.pk])))
    partial = _html(operator_client.get(reverse("deployments:process-log", args=[deployment.pk, process.pk])))

    assert POLL not in html and POLL not in partial
    assert reverse("deployments:deployment-stop", args=[deployment.pk]) not in html
    assert '<span class="tag">stopped</span>' in html
    assert "stopped by oscar" in html
    assert ">Served for</dt><dd>1 h 00 min</dd>" in html  # ready 1 h ago, ended now
    assert "down (exit code 0)" in html


def test_it_refreshes_the_live_part_and_announces_new_processes(viewer_client, seed_pd):
    deployment, process = _ready_deployment(seed_pd)
    url = reverse("deployments:deployment-live", args=[deployment.pk])

    stale = viewer_client.get(url, {"known": ""}, HTTP_HX_REQUEST="true")
    current = viewer_client.get(url, {"known": str(process.pk)}, HTTP_HX_REQUEST="true")

    assert stale.status_code == 200
    assert stale["HX-Trigger"] == "processes-changed"
    assert "HX-Trigger" not in current
    html = _html(current)
    assert '<div id="deployment-live"' in html
    assert "<html" not in html
    assert "31337" in html and POLL in html
    assert f'"known": "{process.pk}"' in html
    logs = _html(viewer_client.get(reverse("deployments:deployment-logs", args=[deployment.pk])))
    assert 'hx-trigger="processes-changed from:body"' in logs
    assert "decode #0" in logs


def test_it_lists_deployments_with_badges_agent_state_and_duration(viewer_client, seed_pd):
    deployment, _ = _ready_deployment(seed_pd)
    Node.objects.filter(pk=seed_pd.node_id).update(agent_heartbeat_at=None)  # no agent ever ran
    html = _html(viewer_client.get(reverse("deployments:deployment-list")))
    assert f"<td>{deployment.pk}</td>" in html
    assert '<span class="tag ok" data-status data-stale-label="{text} (as last seen {at})">ready</span>' in html
    assert f'{reverse("deployments:recipe-detail", args=[seed_pd.pk])}?version=1">v1</a>' in html
    assert '<span class="tag bad" data-stale-label="{text} (as last seen {at})">offline</span>' in html
    assert "1 h 00 min" in html and "(running)" in html  # up since it became ready, 1 h ago
    assert reverse("deployments:deployment-detail", args=[deployment.pk]) in html


def test_the_deployments_list_and_page_show_times_in_one_utc_form_with_the_iso_time_in_its_attribute(viewer_client, seed_pd):
    deployment, _ = _ready_deployment(seed_pd)
    created = Deployment.objects.get(pk=deployment.pk).created_at
    html = _html(viewer_client.get(reverse("deployments:deployment-list")))
    shown = re.findall(r'<time datetime="([^"]+)" title="([^"]+)">([^<]+)</time>', html)
    assert shown and all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", text) and iso == title
                         for iso, title, text in shown)
    assert (created.strftime("%Y-%m-%dT%H:%M:%SZ"), created.strftime("%Y-%m-%dT%H:%M:%SZ"),
            created.strftime("%Y-%m-%d %H:%M:%S UTC")) in shown
    detail = _html(viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk])))
    on_page = re.findall(r'<time datetime="([^"]+)" title="[^"]+">([^<]+)</time>', detail)
    assert on_page and all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", text) for _iso, text in on_page)
    assert not re.search(r">\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ<", detail)  # the ISO form only in attributes


def test_it_shows_the_agent_online_once_it_heartbeats(viewer_client, seed_pd):
    seed_pd.node.agent_heartbeat_at = timezone.now()
    seed_pd.node.save(update_fields=["agent_heartbeat_at"])
    deployment, _ = _ready_deployment(seed_pd)
    html = _html(viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk])))
    name = seed_pd.node.name
    assert (f'<span class="tag ok" data-agent-badge="{name}" data-stale-label="{{text}} (as last seen {{at}})">'
            'agent online</span>') in html
    assert "Waiting for node agent" not in html


# --- stop and cancel ------------------------------------------------------------------------


def test_it_requests_a_stop_of_a_ready_deployment(operator_client, seed_pd):
    deployment, _ = _ready_deployment(seed_pd)
    page = _html(operator_client.get(reverse("deployments:deployment-detail", args=[deployment.pk])))
    assert "Stop deployment" in page and "data-confirm=" in page

    response = operator_client.post(reverse("deployments:deployment-stop", args=[deployment.pk]))

    assert response.status_code == 302
    assert response["Location"] == reverse("deployments:deployment-detail", args=[deployment.pk])
    deployment.refresh_from_db()
    assert (deployment.stop_requested, deployment.cancel_requested) == (True, False)
    html = _html(operator_client.get(response["Location"]))
    assert f"Stop requested for deployment #{deployment.pk}" in html
    assert '<span class="tag warn">stop requested</span>' in html
    assert "oscar-operator requested a stop" in html


def test_it_cancels_a_deployment_waiting_for_its_agent(operator_client, operator, seed_pd):
    deployment = deployment_create(recipe=seed_pd, user=operator)

    response = operator_client.post(reverse("deployments:deployment-stop", args=[deployment.pk]))

    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.STOPPED
    assert deployment.reason == "cancelled by oscar-operator before it became ready"
    html = _html(operator_client.get(response["Location"]))
    assert f"Cancelled deployment #{deployment.pk} (stopped)." in html
    assert "Waiting for node agent" not in html
    assert POLL not in html


# --- logs -----------------------------------------------------------------------------------


def _write_log(path: Path, count: int, *, secret_every: int | None = None) -> list[str]:
    """Write ``count`` numbered lines; every ``secret_every``-th line carries the secret value
    (so some of them sit across any fixed-size read boundary). Returns the lines as they
    must be shown: secret masked."""
    shown = []
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(1, count + 1):
            if secret_every and i % secret_every == 0:
                fh.write(f"line {i:04d} using key {SECRET_VALUE} for the hub\n")
                shown.append(f"line {i:04d} using key ***redacted*** for the hub")
            else:
                fh.write(f"line {i:04d} decode step batch=8\n")
                shown.append(f"line {i:04d} decode step batch=8")
    return shown


def test_it_tails_the_last_lines_of_the_log_with_secrets_redacted(viewer_client, operator, seed_pd, log_dir):
    secret_create(user=operator, name="hub-key", value=SECRET_VALUE)
    log_path = log_dir / "deployment-1" / "decode-0.log"
    log_path.parent.mkdir()
    _write_log(log_path, 300, secret_every=299)
    deployment, process = _ready_deployment(seed_pd, log_path=str(log_path))

    response = viewer_client.get(reverse("deployments:process-log", args=[deployment.pk, process.pk]))

    html = _html(response)
    assert response.status_code == 200
    assert "line 0300 decode step" in html
    assert "line 0101 decode step" in html  # the last 200 of 300 lines
    assert "line 0100 decode step" not in html
    assert SECRET_VALUE not in html
    assert "line 0299 using key ***redacted*** for the hub" in html
    assert f'<pre class="log-tail" id="log-text-{process.pk}">' in html
    assert POLL in html
    assert reverse("deployments:process-log-download", args=[deployment.pk, process.pk]) in html
    page = _html(viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk])))
    assert "line 0300 decode step" in page and SECRET_VALUE not in page


def test_it_downloads_the_full_log_redacted_including_the_rotated_part(viewer_client, operator, seed_pd, log_dir):
    secret_create(user=operator, name="hub-key", value=SECRET_VALUE)
    log_path = log_dir / "decode-0.log"
    Path(f"{log_path}.1").write_text("older line 1\nolder line 2\n", encoding="utf-8")
    lines = _write_log(log_path, 5000, secret_every=7)
    deployment, process = _ready_deployment(seed_pd, log_path=str(log_path))

    response = viewer_client.get(reverse("deployments:process-log-download", args=[deployment.pk, process.pk]))

    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="deployment-{deployment.pk}-decode-0.log"'
    body = b"".join(response.streaming_content).decode()
    expected = ["older line 1", "older line 2", *lines]
    assert "line 0007 using key ***redacted*** for the hub" in expected
    assert body == "\n".join(expected) + "\n"
    assert SECRET_VALUE not in body


def test_it_refuses_to_serve_a_log_path_outside_the_log_dir(viewer_client, seed_pd, log_dir, tmp_path):
    outside = tmp_path / "elsewhere" / "passwd.log"
    outside.parent.mkdir()
    outside.write_text("root:x:0:0:outside the log directory\n", encoding="utf-8")
    (log_dir / "link.log").symlink_to(outside)
    candidates = [str(outside), f"{log_dir}/../elsewhere/passwd.log", str(log_dir / "link.log"), "passwd.log"]
    deployment, process = _ready_deployment(seed_pd)

    for path in candidates:
        ServerProcess.objects.filter(pk=process.pk).update(log_path=path)
        download = viewer_client.get(reverse("deployments:process-log-download", args=[deployment.pk, process.pk]))
        tail = _html(viewer_client.get(reverse("deployments:process-log", args=[deployment.pk, process.pk])))
        assert download.status_code == 404, path
        assert "The log path lies outside the log directory; not shown." in tail, path
        assert "root:x:0:0" not in tail, path


def test_it_answers_404_for_a_missing_log_or_a_process_of_another_deployment(viewer_client, seed_pd, log_dir):
    deployment, process = _ready_deployment(seed_pd, log_path=str(log_dir / "never-written.log"))
    other = Deployment.objects.create(
        recipe=seed_pd, recipe_version=1, node=seed_pd.node, status=DeploymentStatus.STOPPED
    )

    missing = viewer_client.get(reverse("deployments:process-log-download", args=[deployment.pk, process.pk]))
    crossed = viewer_client.get(reverse("deployments:process-log", args=[other.pk, process.pk]))
    tail = _html(viewer_client.get(reverse("deployments:process-log", args=[deployment.pk, process.pk])))

    assert missing.status_code == 404
    assert crossed.status_code == 404
    assert "The log file does not exist (yet)." in tail


# --- stale and terminal texts ---------------------------------------------------------------


def _process_cell(html: str, process: ServerProcess) -> str:
    match = re.search(rf'<tr id="process-{process.pk}">(.*?)</tr>', html, re.S)
    assert match, "process row missing"
    return match.group(1)


def test_it_marks_health_stale_when_the_last_probe_is_older_than_three_periods(viewer_client, seed_pd, settings):
    settings.CEILING_LIVENESS_PERIOD_S = 10.0
    deployment, process = _ready_deployment(
        seed_pd, last_probe_at=timezone.now() - timedelta(seconds=55),
        probe_detail="http://127.0.0.1:30001/health answered 200",
    )
    cell = _process_cell(_html(viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk]))), process)
    assert "stale (agent offline?)" in cell
    assert "healthy" not in cell
    assert re.search(r'last probed <span data-age data-age-of="[^"]+">5\d s ago</span>', cell)

    ServerProcess.objects.filter(pk=process.pk).update(last_probe_at=timezone.now() - timedelta(seconds=5))
    cell = _process_cell(_html(viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk]))), process)
    assert "healthy" in cell and "stale" not in cell.replace('data-stale-label="{text} (as last seen {at})"', "")


def test_it_names_the_probed_url_once_in_the_health_cell(viewer_client, seed_pd):
    url = "http://127.0.0.1:30001/health"
    deployment, process = _ready_deployment(
        seed_pd, health_url=url, last_probe_at=timezone.now() - timedelta(seconds=6),
        probe_detail=f"{url} answered 200",
    )
    page = reverse("deployments:deployment-detail", args=[deployment.pk])
    cell = _process_cell(_html(viewer_client.get(page)), process)
    assert f"{url} answered 200" in cell and cell.count(url) == 1

    # a detail that does not name it leaves the URL on its own line
    ServerProcess.objects.filter(pk=process.pk).update(probe_detail="GET /health: connection refused")
    cell = _process_cell(_html(viewer_client.get(page)), process)
    assert f'<div class="mono small">{url}</div>' in cell and cell.count(url) == 1


def test_it_shows_only_the_terminal_state_of_a_stopped_process(viewer_client, seed_pd):
    deployment, process = _ready_deployment(
        seed_pd, status=ProcessStatus.EXITED, end_reason="terminated", exit_code=0,
        last_probe_at=timezone.now() - timedelta(seconds=9),
        probe_detail="http://127.0.0.1:30001/health answered 200",
    )
    cell = _process_cell(_html(viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk]))), process)
    assert "down (stopped on request, exit code 0)" in cell
    assert "answered 200" not in cell and "probed" not in cell


def test_it_names_the_signal_that_ended_a_process_instead_of_an_exit_code(viewer_client, seed_pd):
    deployment, process = _ready_deployment(
        seed_pd, status=ProcessStatus.FAILED, exit_code=-9, ended_at=timezone.now(),
        reason="killed by signal 9 (SIGKILL); restart policy is 'never'",
    )
    cell = _process_cell(_html(viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk]))), process)
    assert "down (killed by signal 9 (SIGKILL))" in cell
    assert "exit code" not in cell


def test_it_says_a_role_without_cpus_is_not_pinned(viewer_client, seed_pd):
    deployment, process = _ready_deployment(
        seed_pd, role=Role.ROUTER, cpus="", mem_nodes="", numa_node=None, pin_method="none",
        effective_cpus="0-63", effective_mems="0-1", pinning_verified=None, gpu_ids=[],
    )
    cell = _process_cell(_html(viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk]))), process)
    assert "not pinned (recipe sets no CPUs)" in cell
    assert "not checked yet" not in cell


def test_it_redacts_log_lines_in_reasons_on_pages_and_in_the_api(viewer_client, viewer_api, seed_pd):
    leaked = "HF_TOKEN=hf_abcdefghijklmnopqrstuv"
    deployment, process = _ready_deployment(
        seed_pd, status=ProcessStatus.FAILED, reason=f"exited with code 1\nlast log lines:\n{leaked}",
        probe_detail=f"answered 500: {leaked}",
    )
    Deployment.objects.filter(pk=deployment.pk).update(status=DeploymentStatus.FAILED,
                                                       reason=f"decode failed: {leaked}")
    ProcessEvent.objects.create(deployment=deployment, process=process, kind="crashed", message=f"decode: {leaked}")

    html = _html(viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk])))
    listing = _html(viewer_client.get(reverse("deployments:deployment-list")))
    body = viewer_api.get(f"/api/processes/{process.pk}/").json()
    dep = viewer_api.get(f"/api/deployments/{deployment.pk}/").json()
    events = viewer_api.get(f"/api/deployments/{deployment.pk}/events/").json()["results"]

    for text in (html, listing, body["reason"], body["probe_detail"], dep["reason"], events[-1]["message"]):
        assert "hf_abcdefghijklmnopqrstuv" not in text
    assert body["reason"] == "exited with code 1\nlast log lines:\nHF_TOKEN=***redacted***"
    assert dep["reason"] == "decode failed: HF_TOKEN=***redacted***"
    assert events[-1]["message"] == "decode: HF_TOKEN=***redacted***"
    assert "decode failed: HF_TOKEN=***redacted***" in html


def test_serving_counts_from_ready_and_a_deployment_still_starting_says_so(viewer_client, seed_pd):
    # started 1 h 02 min 05 s ago, ready 1 h ago: serving for 1 h 00 min, not the 1 h 02 min since the start
    deployment, _ = _ready_deployment(seed_pd)
    html = _html(viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk])))
    # (an age: "as of" its time once the panel stops updating)
    assert re.search(r'>Serving for</dt><dd><span data-age data-duration-from="[^"]+">1 h 00 min</span></dd>', html), re.findall(
        r">Serv[a-z ]+</dt><dd>.{0,40}", html)
    # never ready yet: how long it has been starting since it was created, not "serving"
    Deployment.objects.filter(pk=deployment.pk).update(status=DeploymentStatus.STARTING, ready_at=None,
                                                       created_at=timezone.now() - timedelta(seconds=95),
                                                       started_at=timezone.now() - timedelta(seconds=94))
    html = _html(viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk])))
    assert re.search(r">Serving</dt><dd>not ready yet; starting for 1 min 3\d s since created</dd>", html)
    assert "Serving for" not in html and "Startup</dt>" not in html
    listing = _html(viewer_client.get(reverse("deployments:deployment-list")))
    assert re.search(r"not ready yet; starting for 1 min 3\d s since created</td>", listing)


@pytest.mark.parametrize(("status", "ready", "limits", "pinning", "sweeps"), [
    (DeploymentStatus.STARTING, False,
     "Not read yet: each server is asked about its capacity once the deployment is ready.",
     "not checked yet", "None yet."),
    (DeploymentStatus.FAILED, False, "Not read: the deployment failed before it was ready.",
     "not checked: the process ended before it was checked", "None."),
    (DeploymentStatus.STOPPED, False, "Not read: the deployment was stopped before it was ready.",
     "not checked: the process ended before it was checked", "None."),
    (DeploymentStatus.STOPPED, True, "Not read: no server reported its capacity before the deployment was stopped.",
     "not checked: the process ended before it was checked", "None."),
])
def test_an_ended_deployment_says_what_it_never_got_without_yet(viewer_client, seed_pd, status, ready, limits,
                                                                pinning, sweeps):
    ended = status in (DeploymentStatus.FAILED, DeploymentStatus.STOPPED)
    deployment, process = _ready_deployment(
        seed_pd, pinning_verified=None, status=ProcessStatus.FAILED if ended else ProcessStatus.SPAWNED,
        ended_at=timezone.now() if ended else None)
    Deployment.objects.filter(pk=deployment.pk).update(
        status=status, ready_at=deployment.ready_at if ready else None, engine_limits=None,
        ended_at=timezone.now() if ended else None)
    html = _html(viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk])))
    assert limits in html
    assert pinning in _process_cell(html, process)
    sweeps_panel = html[html.index('id="deployment-sweeps"'):]
    assert f'<p class="muted">{sweeps}</p>' in sweeps_panel
    if ended:
        assert " yet" not in html[html.index("Engine-reported limits"):html.index("Engine-reported limits") + 400]
        assert "None yet." not in sweeps_panel and "not checked yet" not in html


def test_a_deployment_that_failed_before_any_process_started_says_so_on_every_line(viewer_client, seed_pd):
    # a port clash caught before spawning: the agent took the deployment (started_at) but the
    # process row failed with no pid and no start
    deployment, process = _ready_deployment(
        seed_pd, status=ProcessStatus.FAILED, pid=None, pgid=None, started_at=None, ready_at=None,
        pinning_verified=None, restart_count=0, ended_at=timezone.now(),
        reason="port 8000 on 127.0.0.1 is already in use by pid 4121 (python3)")
    now = timezone.now()
    Deployment.objects.filter(pk=deployment.pk).update(
        status=DeploymentStatus.FAILED, created_at=now, started_at=now, ready_at=None, ended_at=now)
    html = _html(viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk])))
    started = re.search(r"<dt>Started</dt><dd>(.*?)</dd>", html, re.S).group(1)
    assert started.startswith("never") and "started no process" in started
    assert "never started; ended" in html
    cell = _process_cell(html, process)
    assert "not checked: the process never started" in cell
    assert '<span class="tag bad">never started</span>' in cell
    assert "down (" not in cell
    assert "ended before it was" not in cell
    assert "http://127.0.0.1:30001/health" not in cell
    entry = re.search(r"<dt>([^<]*entry URL)</dt><dd[^>]*>(.*?)</dd>", html, re.S | re.I)
    assert entry.group(1) == "Planned entry URL"
    assert entry.group(2) == 'http://127.0.0.1:8000 <span class="muted small">(never served)</span>'


def test_a_process_stopped_before_it_started_says_it_never_started(viewer_client, seed_pd):
    # a deployment stopped while its processes were still waiting to be spawned: the agent's stop
    # finds nothing running and ends the row as exited, "not running"
    deployment, process = _ready_deployment(
        seed_pd, status=ProcessStatus.EXITED, end_reason="not running", pid=None, pgid=None, started_at=None,
        ready_at=None, pinning_verified=None, restart_count=0, ended_at=timezone.now())
    Deployment.objects.filter(pk=deployment.pk).update(status=DeploymentStatus.STOPPED, ready_at=None,
                                                       ended_at=timezone.now())
    cell = _process_cell(_html(viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk]))),
                         process)
    assert '<span class="tag">never started</span>' in cell
    assert "down (" not in cell


@pytest.mark.parametrize(("status", "ready", "label", "suffix"), [
    (DeploymentStatus.READY, True, "Entry URL", ""),
    (DeploymentStatus.STARTING, False, "Entry URL", ""),
    (DeploymentStatus.STOPPED, True, "Entry URL", ""),
    (DeploymentStatus.STOPPED, False, "Planned entry URL", ' <span class="muted small">(never served)</span>'),
    (DeploymentStatus.FAILED, False, "Planned entry URL", ' <span class="muted small">(never served)</span>'),
])
def test_the_entry_url_is_called_planned_only_for_a_deployment_that_ended_without_being_ready(
        viewer_client, seed_pd, status, ready, label, suffix):
    deployment, _ = _ready_deployment(seed_pd)
    ended = status in (DeploymentStatus.STOPPED, DeploymentStatus.FAILED)
    Deployment.objects.filter(pk=deployment.pk).update(
        status=status, ready_at=deployment.ready_at if ready else None,
        ended_at=timezone.now() if ended else None)
    html = _html(viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk])))
    entry = re.search(r"<dt>([^<]*entry URL)</dt><dd[^>]*>(.*?)</dd>", html, re.S | re.I)
    assert (entry.group(1), entry.group(2)) == (label, "http://127.0.0.1:8000" + suffix)


def test_a_process_that_ran_and_ended_unchecked_finishes_the_sentence(viewer_client, seed_pd):
    deployment, process = _ready_deployment(seed_pd, status=ProcessStatus.FAILED, pinning_verified=None,
                                            ended_at=timezone.now())
    Deployment.objects.filter(pk=deployment.pk).update(status=DeploymentStatus.FAILED, ended_at=timezone.now())
    html = _html(viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk])))
    cell = _process_cell(html, process)
    assert "not checked: the process ended before it was checked" in cell
    assert "http://127.0.0.1:30001/health" in cell
    started = re.search(r"<dt>Started</dt><dd>(.*?)</dd>", html, re.S).group(1)
    assert not started.startswith("never")


@pytest.mark.parametrize(("status", "stop_requested", "shown"), [
    (DeploymentStatus.READY, False, True),
    (DeploymentStatus.STARTING, False, True),
    (DeploymentStatus.READY, True, False),
    (DeploymentStatus.STOPPED, False, False),
    (DeploymentStatus.FAILED, False, False),
])
def test_the_sweep_refusal_rule_is_told_only_where_a_sweep_can_be_made(viewer_client, seed_pd, status,
                                                                      stop_requested, shown):
    deployment, _ = _ready_deployment(seed_pd)
    Deployment.objects.filter(pk=deployment.pk).update(
        status=status, stop_requested=stop_requested,
        ended_at=timezone.now() if status in (DeploymentStatus.STOPPED, DeploymentStatus.FAILED) else None,
        engine_limits={"read_at": "2026-12-06T17:00:00Z", "topology": "pd", "error": None,
                       "servers": {"decode0": {"max_total_num_tokens": 65536, "context_length": 8192,
                                               "read_from": ["http://127.0.0.1:30001/get_server_info"]}}})
    html = _html(viewer_client.get(reverse("deployments:deployment-detail", args=[deployment.pk])))
    assert "65536" in html  # the limits table is there either way
    assert ("Sweep creation refuses a length pair" in html) is shown
