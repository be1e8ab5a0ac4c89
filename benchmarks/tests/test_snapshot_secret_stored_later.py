"""A sweep's or run's snapshot keeps what ran as it was then: the recipe spec, each process's argv
and env, what the servers said about themselves. A plain value in it that an admin stores as a
secret only later is masked by every read of the snapshot from then on (the API, the exports,
the pages, the comparisons and the admin), as the deployment's own spec snapshot is."""
from __future__ import annotations

import html

import pytest
from django.test import Client

from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import sweeps as sweep_services
from controlplane.redaction import REDACTED
from deployments import services
from deployments.examples import example_recipe
from deployments.models import Recipe, ServerProcess

pytestmark = pytest.mark.django_db

#: A plain env value of the recipe, stored as a secret after the sweep ran.
VALUE = "Zq8vL2mN4pR7tW1xY5cB"


@pytest.fixture
def swept(admin_api, admin_user, monkeypatch, django_capture_on_commit_callbacks) -> dict[str, int]:
    """A recipe whose env holds :data:`VALUE` as a plain value, deployed (its process's argv and
    env hold the value too) and swept (two runs), then :data:`VALUE` stored as a secret."""
    from deployments.tests.factories import cpu_node_create

    cpu_node_create(name="local")
    recipe = example_recipe("local-sim-single")
    recipe["spec"]["env"] = {"SGLANG_EXTRA_ARG": VALUE}
    assert admin_api.post("/api/recipes/", {**recipe, "name": "later"}, format="json").status_code == 201
    with django_capture_on_commit_callbacks(execute=False):
        deployment = services.deployment_create(recipe=Recipe.objects.get(name="later"), user=admin_user)
    ServerProcess.objects.create(deployment=deployment, role="single", status="ready", pid=4242,
                                 argv=["python", "-m", "sim", "--extra-arg", VALUE],
                                 env_redacted={"SGLANG_EXTRA_ARG": VALUE, "CUDA_VISIBLE_DEVICES": "0"})
    # what a server says about itself may repeat its arguments
    monkeypatch.setattr(sweep_services, "server_info_fetch",
                        lambda base_url: {"version": "0.1", "server_args": {"extra_arg": VALUE}})
    snapshot = sweep_services.sweep_snapshot(sweep=None, deployment=deployment)
    sweep = BenchmarkSweep.objects.create(name="s", deployment=deployment, grid={"concurrency": [1, 2]},
                                          status="done", snapshot=snapshot, topology="single", engine="sim")
    runs = [BenchmarkRun.objects.create(sweep=sweep, ordinal=i, status="done", concurrency=c, input_len=16,
                                        output_len=16, snapshot=snapshot, summary={})
            for i, c in enumerate((1, 2))]
    assert admin_api.post("/api/secrets/", {"name": "moved", "value": VALUE}, format="json").status_code == 201
    return {"deployment": deployment.pk, "process": deployment.processes.get().pk, "sweep": sweep.pk,
            "run": runs[0].pk, "other": runs[1].pk}


#: Every read of a sweep's or run's snapshot, and the deployment's and the process's own reads.
READS = [
    "/api/deployments/{deployment}/",
    "/api/processes/{process}/",
    "/api/sweeps/",
    "/api/sweeps/{sweep}/",
    "/api/sweeps/{sweep}/export/?format=json",
    "/api/sweeps/{sweep}/export/?format=csv",
    "/api/runs/{run}/",
    "/api/runs/{run}/export/?format=json",
    "/api/runs/compare/?ids={run},{other}",
    "/api/runs/compare/?ids={run},{other}&format=csv",
    "/benchmarks/sweeps/{sweep}/",
    "/benchmarks/sweeps/{sweep}/export.json",
    "/benchmarks/sweeps/{sweep}/export.csv",
    "/benchmarks/runs/{run}/",
    "/benchmarks/runs/{run}/export.json",
    "/benchmarks/runs/{run}/export.csv",
    "/benchmarks/compare/?runs={run},{other}",
    "/admin/benchmarks/benchmarksweep/{sweep}/change/",
    "/admin/benchmarks/benchmarkrun/{run}/change/",
    "/admin/deployments/deployment/{deployment}/change/",
    "/admin/deployments/serverprocess/{process}/change/",
]


@pytest.mark.parametrize("url", READS)
def test_no_read_shows_a_value_stored_as_a_secret_after_the_sweep(swept, viewer, viewer_api, url):
    url = url.format(**swept)
    if url.startswith("/api/"):
        response = viewer_api.get(url)
    else:
        client = Client()
        client.force_login(viewer)
        response = client.get(url)

    assert response.status_code == 200, (url, response.status_code)
    text = (b"".join(response.streaming_content) if response.streaming else response.content).decode()
    for shown in (text, html.unescape(text)):
        assert VALUE not in shown, f"{url} shows the secret's value"


def test_the_snapshot_is_masked_throughout_and_keeps_everything_else(swept, viewer_api):
    snapshot = viewer_api.get(f"/api/sweeps/{swept['sweep']}/").json()["snapshot"]
    process = snapshot["processes"][0]

    assert snapshot["spec"]["env"] == {"SGLANG_EXTRA_ARG": REDACTED}
    assert process["argv"] == ["python", "-m", "sim", "--extra-arg", REDACTED]
    assert process["env_redacted"] == {"SGLANG_EXTRA_ARG": REDACTED, "CUDA_VISIBLE_DEVICES": "0"}
    assert snapshot["server_info"]["entry"] == {"version": "0.1", "server_args": {"extra_arg": REDACTED}}
    assert (snapshot["recipe"], snapshot["engine"], snapshot["deployment_id"]) == ("later", "sim", swept["deployment"])
    assert viewer_api.get(f"/api/runs/{swept['run']}/").json()["snapshot"] == snapshot
    # the stored row keeps what ran
    assert BenchmarkSweep.objects.get(pk=swept["sweep"]).snapshot["spec"]["env"] == {"SGLANG_EXTRA_ARG": VALUE}


def test_the_admin_shows_the_snapshot_read_only(swept, viewer):
    client = Client()
    client.force_login(viewer)

    page = html.unescape(client.get(f"/admin/benchmarks/benchmarksweep/{swept['sweep']}/change/").content.decode())

    assert f'"SGLANG_EXTRA_ARG": "{REDACTED}"' in page
    assert 'name="snapshot"' not in page
