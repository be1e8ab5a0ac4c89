"""Process log text is masked with the stored secret values in whichever process serves it: a
server started after the engine (its in-memory registry empty) masks the API tail, the page
tail and the download alike, secrets without a token shape included."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from controlplane import redaction
from controlplane.redaction import REDACTED, redact_text
from deployments.models import RetiredSecretValue, Secret
from deployments.services import secret_create, secret_update
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

HF_VALUE = "hf_SUPERSECRET_abc123XYZ"
PLAIN_VALUE = "violet lantern quarry 58"  # no token shape: only the stored value can catch it


@pytest.fixture
def fresh_process(monkeypatch):
    """This process as a web server started after the secrets were stored: nothing registered,
    nothing read from the database yet (the values of earlier tests are restored afterwards)."""
    monkeypatch.setattr(redaction, "_known_values", set())
    monkeypatch.setattr(redaction, "_stored_read_at", None)


@pytest.fixture
def process(db, settings, tmp_path, admin_user):
    settings.CEILING_LOG_DIR = tmp_path / "logs"
    secret_create(user=admin_user, name="hf-token", value=HF_VALUE)
    secret_create(user=admin_user, name="plain", value=PLAIN_VALUE)
    recipe = recipe_row_create(node=cpu_node_create())
    deployment = deployment_row_create(recipe=recipe)
    row = deployment.processes.get()
    log_path = Path(settings.CEILING_LOG_DIR) / f"deployment-{deployment.pk}" / "single0.log"
    log_path.parent.mkdir(parents=True)
    log_path.write_text(
        "engine started\n"
        f"simulated engine line: fetching with credential {HF_VALUE}\n"
        f"simulated engine line: login as {PLAIN_VALUE} done\n",
        encoding="utf-8",
    )
    row.log_path = str(log_path)
    row.save(update_fields=["log_path"])
    return row


def _assert_masked(text: str) -> None:
    assert HF_VALUE not in text and "abc123XYZ" not in text
    assert PLAIN_VALUE not in text
    assert f"simulated engine line: fetching with credential {REDACTED}" in text
    assert f"simulated engine line: login as {REDACTED} done" in text


def test_the_api_tail_masks_stored_values_in_a_fresh_process(process, fresh_process, viewer_api):
    assert redaction._known_values == set()

    response = viewer_api.get(f"/api/processes/{process.pk}/log/?lines=2")

    assert response.status_code == 200
    _assert_masked(response.json()["text"])
    assert response.json()["text"].count("\n") == 1  # the last two lines


def test_the_download_masks_stored_values_for_a_viewer_in_a_fresh_process(process, fresh_process, viewer):
    client = Client()
    client.force_login(viewer)

    response = client.get(reverse("deployments:process-log-download", args=[process.deployment_id, process.pk]))

    assert response.status_code == 200
    body = b"".join(response.streaming_content).decode()
    _assert_masked(body)
    assert body.startswith("engine started\n")


def test_the_page_tail_masks_stored_values_in_a_fresh_process(process, fresh_process, viewer):
    client = Client()
    client.force_login(viewer)

    html = client.get(reverse("deployments:process-log", args=[process.deployment_id, process.pk])).content.decode()

    assert "engine started" in html
    _assert_masked(html)


def test_a_secret_stored_by_another_process_is_masked_at_once(process, fresh_process, viewer_api):
    # bulk_create sends no signal: as if another process had stored it a moment ago
    Secret.objects.bulk_create([Secret(name="elsewhere", value="quiet meadow 7731")])
    Path(process.log_path).write_text("using quiet meadow 7731 now\n", encoding="utf-8")

    text = viewer_api.get(f"/api/processes/{process.pk}/log/?lines=1").json()["text"]

    assert text.strip() == f"using {REDACTED} now"


def test_redact_text_reads_the_stored_values_itself_in_a_fresh_process(process, fresh_process):
    assert redact_text(f"event: {PLAIN_VALUE}") == f"event: {REDACTED}"


def test_a_rotated_value_stays_masked_in_the_process_that_saw_it(process, fresh_process, admin_user):
    assert redact_text(PLAIN_VALUE) == REDACTED  # read from the database
    secret_update(secret=Secret.objects.get(name="plain"), user=admin_user, value="new plain value 99")

    assert redact_text(f"old {PLAIN_VALUE} new new plain value 99") == f"old {REDACTED} new {REDACTED}"


def test_a_deleted_value_stays_masked_in_the_process_that_deleted_it(db, fresh_process):
    Secret.objects.create(name="short-lived", value="amber falcon 4410")
    Secret.objects.get(name="short-lived").delete()

    assert redact_text("token from amber falcon 4410") == f"token from {REDACTED}"


def _restart(monkeypatch) -> None:
    """This process as one started now: nothing remembered, nothing read yet."""
    monkeypatch.setattr(redaction, "_known_values", set())
    monkeypatch.setattr(redaction, "_stored_read_at", None)


def test_a_rotated_value_is_masked_by_a_process_started_after_the_rotation(process, admin_user, monkeypatch,
                                                                        viewer_api):
    secret_update(secret=Secret.objects.get(name="plain"), user=admin_user, value="new plain value 99")
    _restart(monkeypatch)

    text = viewer_api.get(f"/api/processes/{process.pk}/log/?lines=3").json()["text"]

    assert PLAIN_VALUE not in text and f"login as {REDACTED} done" in text
    assert redact_text("new plain value 99 and violet lantern quarry 58") == f"{REDACTED} and {REDACTED}"
    retired = RetiredSecretValue.objects.get()
    assert (retired.name, retired.plaintext()) == ("plain", PLAIN_VALUE)


def test_a_deleted_value_is_masked_by_a_process_started_after_the_deletion(process, monkeypatch, viewer_api):
    Secret.objects.get(name="hf-token").delete()
    _restart(monkeypatch)

    text = viewer_api.get(f"/api/processes/{process.pk}/log/?lines=3").json()["text"]

    assert HF_VALUE not in text and f"fetching with credential {REDACTED}" in text
    assert redact_text("amber SUPERSECRET_abc123XYZ") == "amber SUPERSECRET_abc123XYZ"  # no pattern, no value
    assert redact_text(f"x {HF_VALUE} y") == f"x {REDACTED} y"


def test_saving_a_secret_unchanged_retires_nothing_and_retired_values_are_never_served(process, admin_user,
                                                                                   admin_api):
    secret = Secret.objects.get(name="plain")
    secret.description = "same value"
    secret.save()
    assert not RetiredSecretValue.objects.exists()
    secret_update(secret=secret, user=admin_user, value="new plain value 99")

    body = admin_api.get("/api/secrets/").content.decode()

    assert RetiredSecretValue.objects.count() == 1
    assert PLAIN_VALUE not in body and "new plain value 99" not in body


def test_redaction_in_an_event_loop_does_not_touch_the_database(db, fresh_process):
    import asyncio

    Secret.objects.bulk_create([Secret(name="loop", value="copper kettle 5512")])

    async def inside() -> str:
        return redact_text("HF_TOKEN=abcdefgh and copper kettle 5512")

    # no SynchronousOnlyOperation: the cached values and the patterns are used
    assert asyncio.run(inside()) == f"HF_TOKEN={REDACTED} and copper kettle 5512"
    assert redact_text("copper kettle 5512") == REDACTED  # outside the loop it is read


@pytest.mark.parametrize(("value", "said"), [("e", "got 1"), ("abc", "got 3"), ("1234567", "got 7"),
                                             ("  ab\t ", "got 2 (leading and trailing whitespace not counted)")])
def test_a_secret_value_too_short_to_mask_is_refused(db, admin_user, value, said):
    from controlplane.errors import InvalidInput

    with pytest.raises(InvalidInput) as exc:
        secret_create(user=admin_user, name="short", value=value)
    assert exc.value.errors == {"value": [f"A secret value needs at least 8 characters; {said}: a shorter value is "
                                          "too likely to be ordinary text, such as the log level INFO, to be masked "
                                          "in logs."]}
    assert not Secret.objects.filter(name="short").exists()
