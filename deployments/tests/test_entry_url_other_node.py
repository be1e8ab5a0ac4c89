"""A server bound to every interface (``0.0.0.0``) on a node other than this host is reached at
that node's recorded address (``Node.hostname``, as its agent registered it), not at 127.0.0.1,
which from here is this host: the dry-run's "Clients connect to" and health URLs, a deployment's
entry URL, and what the benchmark worker asks (the entry server's health, ``/metrics``). A node
with no recorded address says so plainly instead of giving a URL; this host's own node keeps
loopback."""
from __future__ import annotations

import html
import http.server
import io
import threading

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from benchmarks.services.sweeps import _metrics_urls, entry_health, sweep_create
from controlplane.errors import Conflict
from deployments import services
from deployments.choices import DeploymentStatus, ProcessStatus
from deployments.examples import example_recipe
from deployments.models import Deployment, Node, ProcessEvent, Recipe, ServerProcess
from deployments.tests.factories import cpu_node_create, seed_node_create
from deployments.tests.test_agent_support import free_ports

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("model_roots")]

NO_ADDRESS = ("node 'seed-8gpu' has no recorded address (the host name its node agent reports when it registers), "
              "so a server bound to 0.0.0.0 there has no URL from this host (127.0.0.1 here is this host, not that "
              "node): start the node's agent there (manage.py node_agent --name seed-8gpu) or bind the role's host "
              "to the node's own address")


@pytest.fixture
def tp4(operator):
    """The seeded ``seed-v4-flash-tp4`` recipe: one SGLang server bound to 0.0.0.0:30000 on seed-8gpu."""
    example = example_recipe("seed-v4-flash-tp4")
    return services.recipe_create(user=operator, name=example["name"], engine=example["engine"],
                                  topology=example["topology"], node=seed_node_create(), spec=example["spec"])


def _page(client, recipe) -> str:
    return html.unescape(client.get(reverse("deployments:recipe-dry-run", args=[recipe.pk])).content.decode())


def test_the_dry_run_of_another_node_names_that_node(operator_client, operator_api, tp4, settings):
    assert settings.CEILING_NODE_NAME != "seed-8gpu"

    page = _page(operator_client, tp4)
    plan = operator_api.get(f"/api/recipes/{tp4.pk}/dry-run/").json()["plan"]

    assert '<dt>Clients connect to</dt><dd class="mono">http://seed-8gpu:30000</dd>' in page
    assert ("http://seed-8gpu:30000/health <span class=\"muted small health-note\">(its node agent probes "
            "http://127.0.0.1:30000/health on node seed-8gpu)</span>") in page
    assert "http://127.0.0.1:30000<" not in page
    assert plan["entry_url"] == "http://seed-8gpu:30000"
    # the plan the node agent runs probes its own server through loopback, on the node
    assert plan["processes"][0]["health_url"] == "http://127.0.0.1:30000/health"


def test_the_dryrun_command_says_the_same(tp4):
    out = io.StringIO()

    call_command("dryrun", "seed-v4-flash-tp4", stdout=out)

    lines = out.getvalue().splitlines()
    assert lines[1].startswith("entry http://seed-8gpu:30000; ")
    assert ("  health: http://seed-8gpu:30000/health; generate: http://seed-8gpu:30000/generate (its node agent "
            "probes http://127.0.0.1:30000/health on node seed-8gpu)") in lines


def test_a_deployment_on_another_node_records_that_nodes_url(operator_api, tp4, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        created = operator_api.post("/api/deployments/", {"recipe": tp4.pk}, format="json")

    assert created.json()["entry_url"] == "http://seed-8gpu:30000"


def test_this_hosts_node_keeps_loopback(operator_api, operator, settings):
    settings.CEILING_NODE_NAME = "seed-8gpu"   # this server runs on the seed machine
    example = example_recipe("seed-v4-flash-tp4")
    recipe = services.recipe_create(user=operator, name="here", engine="sglang", topology="single",
                                    node=seed_node_create(), spec=example["spec"])

    plan = operator_api.get(f"/api/recipes/{recipe.pk}/dry-run/").json()["plan"]

    assert plan["entry_url"] == "http://127.0.0.1:30000"
    assert NO_ADDRESS not in plan["warnings"]


def test_a_node_without_an_address_says_so_instead_of_a_url(operator_client, operator_api, operator, tp4,
                                                            django_capture_on_commit_callbacks):
    Node.objects.filter(name="seed-8gpu").update(hostname="", agent_heartbeat_at=timezone.now())

    page = _page(operator_client, tp4)
    plan = operator_api.get(f"/api/recipes/{tp4.pk}/dry-run/").json()["plan"]

    assert f'<dt>Clients connect to</dt><dd><span class="tag warn">no URL</span> {NO_ADDRESS}</dd>' in page
    assert "127.0.0.1:30000<" not in page and "127.0.0.1:30000</dd>" not in page
    assert (plan["entry_url"], NO_ADDRESS in plan["warnings"]) == (None, True)
    # a deploy records no URL, the reason on its timeline and page, and a sweep of it is refused
    with django_capture_on_commit_callbacks(execute=False):
        deployment = services.deployment_create(recipe=Recipe.objects.get(pk=tp4.pk), user=operator)
    assert deployment.entry_url == ""
    assert NO_ADDRESS in ProcessEvent.objects.filter(deployment=deployment, kind="warning").values_list("message",
                                                                                                         flat=True)
    detail = html.unescape(operator_client.get(reverse("deployments:deployment-detail", args=[deployment.pk]))
                           .content.decode())
    assert f'<dt>Entry URL</dt><dd><span class="tag warn">no URL</span> {NO_ADDRESS}</dd>' in detail
    with pytest.raises(Conflict) as refused:
        sweep_create(deployment=deployment, user=operator, grid={"concurrency": [1], "lengths": ["16:16"]})
    assert str(refused.value) == f"deployment #{deployment.pk} has no entry URL for the benchmark worker: {NO_ADDRESS}"


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the stdlib's name
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_benchmark_worker_asks_another_nodes_processes_there(operator):
    # A server on every interface of a node whose recorded address is "localhost": its row keeps the
    # URL the agent probes (127.0.0.1), the worker asks it at the node's address.
    (port,) = free_ports(1)
    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        node = cpu_node_create(name="remote-box")
        Node.objects.filter(pk=node.pk).update(hostname="localhost")
        spec = {"model": {"name": "sim/tiny"}, "roles": {"single": {"cpus": "0", "host": "0.0.0.0", "port": port}},
                "sim": {"profile": "demo-fast"}}
        recipe = services.recipe_create(user=operator, name="remote-sim", engine="sim", topology="single",
                                        node=Node.objects.get(pk=node.pk), spec=spec)
        deployment = Deployment.objects.create(recipe=recipe, recipe_version=1, spec_snapshot=recipe.spec, node=node,
                                               status=DeploymentStatus.READY, entry_url=f"http://localhost:{port}")
        ServerProcess.objects.create(deployment=deployment, role="single", status=ProcessStatus.READY,
                                     ports={"http": port}, health_url=f"http://127.0.0.1:{port}/health")
        deployment = Deployment.objects.select_related("recipe", "node").get(pk=deployment.pk)

        assert entry_health(deployment=deployment) == (True, f"GET http://localhost:{port}/health answered 200")
        assert _metrics_urls(deployment) == [f"http://localhost:{port}/metrics"]
    finally:
        server.shutdown()
        server.server_close()


def test_a_loopback_bound_process_of_another_node_is_said_to_answer_there_only(operator_client, operator):
    example = example_recipe("seed-v4-flash-pd")   # prefill and decode on 127.0.0.1, the router on 0.0.0.0
    recipe = services.recipe_create(user=operator, name=example["name"], engine="sglang", topology="pd",
                                    node=seed_node_create(), spec=example["spec"])

    page = _page(operator_client, recipe)

    assert '<dt>Clients connect to</dt><dd class="mono">http://seed-8gpu:30080</dd>' in page
    assert ("http://127.0.0.1:30000/health <span class=\"muted small health-note\">(bound to 127.0.0.1: it answers "
            "on node seed-8gpu only, where its node agent probes it)</span>") in page
    assert ("http://seed-8gpu:30080/health <span class=\"muted small health-note\">(its node agent probes "
            "http://127.0.0.1:30080/health on node seed-8gpu)</span>") in page


def test_an_entry_role_bound_to_loopback_on_another_node_is_warned_before_a_deploy(operator_client, operator):
    example = example_recipe("seed-v4-flash-tp4")
    spec = dict(example["spec"], roles={"single": dict(example["spec"]["roles"]["single"], host="127.0.0.1")})
    recipe = services.recipe_create(user=operator, name="tp4-loopback", engine="sglang", topology="single",
                                    node=seed_node_create(), spec=spec)

    page = _page(operator_client, recipe)

    warning = ("the entry URL http://127.0.0.1:30000 is loopback on node 'seed-8gpu': it answers only there, so "
               "clients on this host, a sweep included, cannot reach it; bind the single role's host to 0.0.0.0 or "
               "to the node's own address")
    assert warning in page
    assert '<dt>Clients connect to</dt><dd class="mono">http://127.0.0.1:30000</dd>' in page   # used as given


def test_this_hosts_own_loopback_entry_gets_no_such_warning(operator_client, operator, settings):
    settings.CEILING_NODE_NAME = "seed-8gpu"   # the recipe's node is this host's
    example = example_recipe("seed-v4-flash-tp4")
    spec = dict(example["spec"], roles={"single": dict(example["spec"]["roles"]["single"], host="127.0.0.1")})
    recipe = services.recipe_create(user=operator, name="tp4-here", engine="sglang", topology="single",
                                    node=seed_node_create(), spec=spec)

    assert "is loopback on node" not in _page(operator_client, recipe)
