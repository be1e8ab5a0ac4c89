"""A secret value has at least 8 characters (``controlplane.redaction.MIN_VALUE_LENGTH``), the one
minimum of storing, masking and the refusal of free text: "INFO" is refused as a secret in the API,
admin and the services; a value stored before that minimum is still given to its engines but masks
no ordinary word of a log and refuses no recipe description, and a warning names its secret. Kept
earlier values of changed or deleted secrets are forgotten with ``manage.py
forget_retired_secret_values``, after which running processes stop masking them."""
from __future__ import annotations

import io
import logging
import time
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from controlplane import redaction
from controlplane.errors import InvalidInput
from controlplane.redaction import MIN_VALUE_LENGTH, REDACTED, redact_text, register_secret_value, secret_value_found
from deployments import services
from deployments.examples import example_recipe
from deployments.forms import SecretAdminForm
from deployments.models import RetiredSecretValue, Secret
from deployments.recipes import SECRET_VALUE_MIN_LENGTH
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create, seed_node_create

pytestmark = pytest.mark.django_db

LOG_LINE = "2026-12-07 13:01:51,043 INFO ceiling.sim.kv: prefix cache hit"
SHORT_REFUSAL = ("A secret value needs at least 8 characters; got 4: a shorter value is too likely to be ordinary "
                 "text, such as the log level INFO, to be masked in logs.")


def fresh_process_reset(monkeypatch) -> None:
    """This process as one started now (another process than the one that wrote the secrets):
    nothing registered, noted or read, nothing reported."""
    for name in ("_known_values", "_registered_forms", "_stored_forms", "_short_reported", "_unreadable_reported"):
        monkeypatch.setattr(redaction, name, set())
    monkeypatch.setattr(redaction, "_noted_forms", {})
    monkeypatch.setattr(redaction, "_stored_read_at", None)


@pytest.fixture
def fresh_process(monkeypatch):
    fresh_process_reset(monkeypatch)


def _age_the_read(monkeypatch) -> None:
    """As if the last read of the stored values were older than the cache keeps it: the next
    redaction reads the database again, as another process does by itself."""
    monkeypatch.setattr(redaction, "_stored_read_at", time.monotonic() - redaction.STORED_VALUES_MAX_AGE_S - 1)


# --- one minimum -------------------------------------------------------------------------------


def test_one_minimum_of_eight_for_storing_masking_and_free_text():
    assert MIN_VALUE_LENGTH == SECRET_VALUE_MIN_LENGTH == 8
    assert not hasattr(redaction, "PLAIN_VALUE_MIN_LENGTH")
    assert redaction.value_forms("SEVENch") == set() and redaction.value_forms("EIGHTchr")
    assert not secret_value_found("logs at SEVENch level", "SEVENch")
    assert secret_value_found("logs at EIGHTchr level", "EIGHTchr")


@pytest.mark.parametrize(("value", "said"), [
    ("INFO", "got 4"),
    ("1234567", "got 7"),
    ("  INFO\t", "got 4 (leading and trailing whitespace not counted)"),
])
def test_the_api_refuses_a_short_value_saying_the_minimum_and_the_length(admin_api, value, said):
    response = admin_api.post("/api/secrets/", {"name": "s4", "value": value}, format="json")

    assert response.status_code == 400
    assert response.json() == {"value": [
        f"A secret value needs at least 8 characters; {said}: a shorter value is too likely to be ordinary text, "
        "such as the log level INFO, to be masked in logs."]}
    assert value.strip() not in response.content.decode().replace("log level INFO", "")
    assert not Secret.objects.exists()


def test_the_api_stores_eight_characters_and_refuses_a_short_new_value(admin_api):
    made = admin_api.post("/api/secrets/", {"name": "s8", "value": "8chars!!"}, format="json")
    assert made.status_code == 201, made.json()

    update = admin_api.patch(f"/api/secrets/{made.json()['id']}/", {"value": "INFO"}, format="json")

    assert update.status_code == 400
    assert update.json() == {"value": [SHORT_REFUSAL]}
    assert Secret.objects.get().plaintext() == "8chars!!"


def test_the_services_refuse_a_short_value(admin_user):
    with pytest.raises(InvalidInput) as refused:
        services.secret_create(user=admin_user, name="s4", value="INFO")
    assert refused.value.errors == {"value": [SHORT_REFUSAL]}

    secret = services.secret_create(user=admin_user, name="s8", value="long enough")
    with pytest.raises(InvalidInput) as refused:
        services.secret_update(secret=secret, user=admin_user, value="INFO")
    assert refused.value.errors == {"value": [SHORT_REFUSAL]}


def test_the_admin_form_refuses_a_short_value_and_says_the_minimum(admin_user):
    form = SecretAdminForm(data={"name": "s4", "value": "INFO", "description": ""})
    assert not form.is_valid()
    assert form.errors["value"] == [SHORT_REFUSAL]
    assert "At least 8 characters." in str(form.fields["value"].help_text)

    admin = Client()
    admin.force_login(admin_user)
    page = admin.post(reverse("admin:deployments_secret_add"), {"name": "s4", "value": "INFO", "description": ""})
    assert page.status_code == 200
    assert "A secret value needs at least 8 characters; got 4" in page.content.decode()
    assert not Secret.objects.exists()

    secret = services.secret_create(user=admin_user, name="s8", value="long enough")
    page = admin.post(reverse("admin:deployments_secret_change", args=[secret.pk]),
                      {"name": "s8", "value": "INFO", "description": ""})
    assert "A secret value needs at least 8 characters; got 4" in page.content.decode()
    assert Secret.objects.get().plaintext() == "long enough"


# --- a value stored before the minimum --------------------------------------------------------


@pytest.fixture
def short_secret(db) -> Secret:
    """Secret ``s4`` holding ``INFO``, as stored while the minimum was 4 (the ORM does not check)."""
    return Secret.objects.create(name="s4", value="INFO")


@pytest.fixture
def process(settings, tmp_path):
    settings.CEILING_LOG_DIR = tmp_path / "logs"
    deployment = deployment_row_create(recipe=recipe_row_create(node=cpu_node_create()))
    row = deployment.processes.get()
    log_path = Path(settings.CEILING_LOG_DIR) / f"deployment-{deployment.pk}" / "single0.log"
    log_path.parent.mkdir(parents=True)
    log_path.write_text(f"{LOG_LINE}\n", encoding="utf-8")
    row.log_path = str(log_path)
    row.save(update_fields=["log_path"])
    return row


def test_a_short_value_stored_before_masks_no_word_of_a_log(short_secret, process, fresh_process, viewer_api,
                                                             viewer, caplog):
    with caplog.at_level(logging.WARNING, logger="controlplane.redaction"):
        tail = viewer_api.get(f"/api/processes/{process.pk}/log/?lines=5")
    assert tail.status_code == 200
    assert tail.json()["text"].strip() == LOG_LINE
    client = Client()
    client.force_login(viewer)
    download = client.get(reverse("deployments:process-log-download", args=[process.deployment_id, process.pk]))
    assert b"".join(download.streaming_content).decode().strip() == LOG_LINE
    assert redact_text(LOG_LINE) == LOG_LINE

    warnings = [r.getMessage() for r in caplog.records if r.name == "controlplane.redaction"]
    assert warnings == ["secret 's4' has a value shorter than 8 characters, stored before that minimum: engines are "
                        "still given it, but it is not masked in logs nor refused in recipes; give the secret a new "
                        "value of at least 8 characters"]
    assert "INFO" not in warnings[0]  # the value itself is never named
    with caplog.at_level(logging.WARNING, logger="controlplane.redaction"):
        caplog.clear()
        redaction.stored_secret_values_load()
    assert not caplog.records  # once per process


def test_a_short_value_stored_before_refuses_no_recipe_description(short_secret, operator_api, settings):
    settings.CEILING_MODEL_ROOTS = ["/models"]
    seed_node_create()
    example = example_recipe("seed-v4-flash-pd")
    made = operator_api.post("/api/recipes/", {k: example[k] for k in ("name", "engine", "topology", "node", "spec")},
                             format="json")
    assert made.status_code == 201, made.json()

    response = operator_api.patch(f"/api/recipes/{made.json()['id']}/", {"description": "logs at INFO level"},
                                  format="json")

    assert response.status_code == 200, response.json()
    assert response.json()["description"] == "logs at INFO level"


def test_a_description_holding_an_eight_character_value_is_refused(admin_user, operator_api, settings):
    services.secret_create(user=admin_user, name="s8", value="EIGHTchr")
    settings.CEILING_MODEL_ROOTS = ["/models"]
    seed_node_create()
    example = example_recipe("seed-v4-flash-pd")
    made = operator_api.post("/api/recipes/", {k: example[k] for k in ("name", "engine", "topology", "node", "spec")},
                             format="json")

    response = operator_api.patch(f"/api/recipes/{made.json()['id']}/", {"description": "logs at EIGHTchr level"},
                                  format="json")

    assert response.status_code == 400
    assert "holds the value of secret 's8'" in response.json()["description"][0]
    assert redact_text("logs at EIGHTchr level") == f"logs at {REDACTED} level"


def test_a_short_value_stored_before_is_still_given_to_the_engine(short_secret, settings):
    from deployments.agent import _plan_for
    from deployments.models import Deployment

    settings.CEILING_MODEL_ROOTS = ["/models"]
    node = seed_node_create()
    example = example_recipe("seed-v4-flash-pd")
    spec = {**example["spec"], "secrets": {"HF_TOKEN": "s4"}}
    recipe = recipe_row_create(node=node, engine=example["engine"], topology=example["topology"], spec=spec)
    deployment = Deployment.objects.create(recipe=recipe, recipe_version=recipe.version, spec_snapshot=spec, node=node)

    plan = _plan_for(deployment, with_secrets=True)

    workers = [p for p in plan.processes if p.role != "router"]
    assert workers and all(p.env["HF_TOKEN"] == "INFO" for p in workers)
    assert all(p.env_redacted["HF_TOKEN"] != "INFO" for p in workers)


def test_a_description_only_edit_of_a_secret_stored_before_works(short_secret, admin_api):
    response = admin_api.patch(f"/api/secrets/{short_secret.pk}/", {"description": "old db password"}, format="json")

    assert response.status_code == 200, response.json()
    assert Secret.objects.get().plaintext() == "INFO"


# --- forgetting earlier values ------------------------------------------------------------------


def _forget(*args: str) -> str:
    out = io.StringIO()
    call_command("forget_retired_secret_values", *args, stdout=out)
    return out.getvalue()


def test_a_deleted_secrets_value_stays_masked_until_it_is_forgotten(admin_api, fresh_process, monkeypatch):
    made = admin_api.post("/api/secrets/", {"name": "old-db", "value": "amber-falcon-4410"}, format="json")
    assert admin_api.delete(f"/api/secrets/{made.json()['id']}/").status_code == 204
    assert RetiredSecretValue.objects.filter(name="old-db").count() == 1
    # another process, e.g. the web server that serves the logs
    fresh_process_reset(monkeypatch)
    assert redact_text("login amber-falcon-4410") == f"login {REDACTED}"

    out = _forget("--name", "old-db")

    assert "forgot the value secret 'old-db' had until " in out and "UTC (deleted)" in out
    assert "forgot 1 earlier value(s)" in out and "amber-falcon-4410" not in out
    assert not RetiredSecretValue.objects.exists()
    _age_the_read(monkeypatch)
    assert redact_text("login amber-falcon-4410") == "login amber-falcon-4410"


def test_the_process_that_deleted_a_value_masks_it_a_while_then_as_the_database_says(admin_user, fresh_process,
                                                                                   monkeypatch):
    secret = services.secret_create(user=admin_user, name="old-db", value="amber-falcon-4410")
    services.secret_delete(secret=secret, user=admin_user)
    _forget("--all")
    _age_the_read(monkeypatch)
    # noted a moment ago: a read from another thread before the delete commits must not unmask it
    assert redact_text("amber-falcon-4410") == REDACTED

    monkeypatch.setattr(redaction, "_noted_forms", {f: time.monotonic() - 1 for f in redaction._noted_forms})
    _age_the_read(monkeypatch)
    assert redact_text("amber-falcon-4410") == "amber-falcon-4410"


def test_a_value_registered_for_a_launch_stays_masked_after_it_is_forgotten(admin_user, fresh_process, monkeypatch):
    secret = services.secret_create(user=admin_user, name="old-db", value="amber-falcon-4410")
    secret.delete()
    fresh_process_reset(monkeypatch)
    register_secret_value("amber-falcon-4410")  # a node agent that launched an engine with it
    _forget("--name", "old-db")
    _age_the_read(monkeypatch)

    assert redact_text("amber-falcon-4410") == REDACTED


def test_a_rotated_value_is_forgotten_while_the_current_one_stays_masked(admin_user, fresh_process, monkeypatch):
    secret = services.secret_create(user=admin_user, name="db", value="first-value-0001")
    services.secret_update(secret=secret, user=admin_user, value="second-value-0002")
    fresh_process_reset(monkeypatch)
    assert redact_text("first-value-0001 second-value-0002") == f"{REDACTED} {REDACTED}"

    out = _forget("--name", "db")

    assert "forgot the value secret 'db' had until " in out and "(changed since)" in out
    _age_the_read(monkeypatch)
    assert redact_text("first-value-0001 second-value-0002") == f"first-value-0001 {REDACTED}"


def test_before_and_dry_run_select_and_list_without_forgetting(admin_user):
    for name in ("a-secret", "b-secret"):
        services.secret_delete(secret=services.secret_create(user=admin_user, name=name, value=f"{name}-value-1"),
                               user=admin_user)
    RetiredSecretValue.objects.filter(name="a-secret").update(retired_at=timezone.now() - timedelta(days=30))
    cutoff = (timezone.now() - timedelta(days=1)).date().isoformat()

    listed = _forget("--before", cutoff, "--dry-run")
    assert "would forget the value secret 'a-secret' had until " in listed and "b-secret" not in listed
    assert "1 earlier value(s) would be forgotten; nothing was changed (--dry-run)" in listed
    assert RetiredSecretValue.objects.count() == 2

    assert "forgot 1 earlier value(s)" in _forget("--before", cutoff)
    assert list(RetiredSecretValue.objects.values_list("name", flat=True)) == ["b-secret"]
    assert _forget("--name", "b-secret", "--before", cutoff).startswith("no kept earlier secret value matches")
    assert "forgot 1 earlier value(s)" in _forget("--all")
    assert not RetiredSecretValue.objects.exists()


@pytest.mark.parametrize(("args", "refusal"), [
    ((), "say which earlier secret values to forget: --name NAME (repeatable), --before DATE, or --all"),
    (("--all", "--name", "x"), "--all forgets every kept earlier value: give it alone"),
    (("--before", "yesterday"), "--before takes a date (2026-12-07) or a date and time (2026-12-07T13:00, UTC unless a "
                                "zone is given), got 'yesterday'"),
    (("--before", "2026-02-30"), "got '2026-02-30'"),
    (("--name", "nope"), "no earlier value of a secret named 'nope' is kept (kept for: 'old-db')"),
])
def test_the_command_refuses_what_it_cannot_do_with_status_2(admin_user, args, refusal):
    services.secret_delete(secret=services.secret_create(user=admin_user, name="old-db", value="amber-falcon-4410"),
                           user=admin_user)

    with pytest.raises(CommandError) as refused:
        _forget(*args)

    assert refusal in str(refused.value) and refused.value.returncode == 2
    assert RetiredSecretValue.objects.count() == 1


def test_a_read_that_cannot_decrypt_a_value_forgets_nothing(admin_user, settings, fresh_process, monkeypatch):
    settings.CEILING_SECRETS_KEY = Fernet.generate_key().decode()
    services.secret_create(user=admin_user, name="db", value="first-value-0001")
    fresh_process_reset(monkeypatch)
    assert redact_text("first-value-0001") == REDACTED
    settings.CEILING_SECRETS_KEY = Fernet.generate_key().decode()  # this process now has another key
    _age_the_read(monkeypatch)

    assert redact_text("first-value-0001") == REDACTED
