"""The admin's deployment, server-process and process-event pages show a value that an admin
stored as a secret after the deployment ran masked, as the API shows those rows: the spec
snapshot, the argv, the env, and the texts that carry an engine's output (reasons, the probe's
detail, event messages). The raw fields are not on the page."""
from __future__ import annotations

import html

import pytest
from django.test import Client

from controlplane.redaction import REDACTED
from deployments.models import ProcessEvent
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = pytest.mark.django_db

VALUE = "Zq8vL2mN4pR7tW1xY5cB"


@pytest.fixture
def rows(admin_api) -> dict[str, int]:
    recipe = recipe_row_create(node=cpu_node_create(name="local"), spec={"env": {"SGLANG_EXTRA_ARG": VALUE}})
    deployment = deployment_row_create(recipe=recipe, status="failed")
    deployment.reason = f"single failed: bad argument {VALUE}"
    deployment.save()
    process = deployment.processes.get()
    process.argv = ["python", "-m", "sim", "--extra-arg", VALUE]
    process.env_redacted = {"SGLANG_EXTRA_ARG": VALUE}
    process.reason = f"exited with code 1\nlast log lines:\nbad argument {VALUE}"
    process.probe_detail = f"http://127.0.0.1:30000/health answered 500: {VALUE}"
    process.end_reason = f"crashed on {VALUE}"
    process.save()
    event = ProcessEvent.objects.create(deployment=deployment, process=process, kind="failed",
                                        message=f"bad argument {VALUE}")
    assert admin_api.post("/api/secrets/", {"name": "moved", "value": VALUE}, format="json").status_code == 201
    return {"deployment": deployment.pk, "process": process.pk, "event": event.pk}


@pytest.mark.parametrize("url", [
    "/admin/deployments/deployment/{deployment}/change/",
    "/admin/deployments/serverprocess/{process}/change/",
    "/admin/deployments/processevent/{event}/change/",
    "/admin/deployments/processevent/",
    "/api/deployments/{deployment}/",
    "/api/processes/{process}/",
])
def test_the_admin_masks_what_the_api_masks(rows, viewer, url):
    client = Client()
    client.force_login(viewer)

    response = client.get(url.format(**rows))

    assert response.status_code == 200
    for shown in (response.content.decode(), html.unescape(response.content.decode())):
        assert VALUE not in shown
    assert REDACTED in html.unescape(response.content.decode())


def test_the_admin_shows_each_field_masked_in_its_place(rows, viewer):
    client = Client()
    client.force_login(viewer)

    deployment = html.unescape(client.get(f"/admin/deployments/deployment/{rows['deployment']}/change/")
                               .content.decode())
    process = html.unescape(client.get(f"/admin/deployments/serverprocess/{rows['process']}/change/")
                            .content.decode())

    assert f'"SGLANG_EXTRA_ARG": "{REDACTED}"' in deployment            # the spec snapshot
    assert f"single failed: bad argument {REDACTED}" in deployment        # the reason
    assert f'"--extra-arg",\n  "{REDACTED}"' in process                    # the argv
    assert f'"SGLANG_EXTRA_ARG": "{REDACTED}"' in process                  # the env
    assert f"answered 500: {REDACTED}" in process and f"crashed on {REDACTED}" in process
    for raw in ("spec_snapshot", "reason", "argv", "env_redacted", "probe_detail", "end_reason"):
        assert f'name="{raw}"' not in deployment + process
    # in the raw field's place: the recipe version before the spec snapshot, the node after it
    assert deployment.index("Recipe version") < deployment.index("Spec snapshot") < deployment.index("Node:")
