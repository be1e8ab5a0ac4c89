"""Stored secrets are encrypted at rest (:mod:`controlplane.secretbox`): the database holds Fernet
tokens only, while a launched engine still gets the plaintext in its environment and redaction
still masks current and retired values. The key is ``CEILING_SECRETS_KEY`` or a key file made
once, 0600, by exactly one of several processes starting together; a value the key cannot open
gives an error naming the secret and the key source, never a crash or the token in an env var."""
from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.conf import settings as django_settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.urls import reverse

from controlplane import redaction, secretbox
from controlplane.redaction import REDACTED, redact_text
from controlplane.secretbox import SealedValue, SecretsKeyError, SecretUnreadable, key_file_load, secret_plaintext
from deployments import services
from deployments.agent import deployment_launch, deployment_teardown
from deployments.models import Deployment, Node, NumaNode, RetiredSecretValue, Secret
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create
from deployments.tests.test_agent_support import engine_pids_of, free_ports, wait_for
from deployments.topology import format_cpulist

HF_VALUE = "hf_AtRestSecret0123456789xyz"
PLAIN_VALUE = "indigo harbour lantern 4242"  # no token shape: only the stored value masks it
BEFORE, AFTER = "0005_retired_secret_values", "0006_secret_values_encrypted"
ROOT = Path(django_settings.BASE_DIR)


@pytest.fixture
def key(settings) -> str:
    """A fresh ``CEILING_SECRETS_KEY`` for this test."""
    settings.CEILING_SECRETS_KEY = Fernet.generate_key().decode()
    return settings.CEILING_SECRETS_KEY


@pytest.fixture
def fresh_process(monkeypatch):
    """This process as one started now: no value registered or read, no error reported yet."""
    monkeypatch.setattr(redaction, "_known_values", set())
    monkeypatch.setattr(redaction, "_stored_read_at", None)
    monkeypatch.setattr(redaction, "_unreadable_reported", set())


def raw_values(table: str) -> list[str]:
    """The ``value`` column of ``table`` as the database holds it."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT value FROM {table} ORDER BY id")
        return [row[0] for row in cursor.fetchall()]


# --- at rest --------------------------------------------------------------------------------


def test_it_never_writes_the_plaintext_to_the_value_column(db, key, admin_user):
    secret = services.secret_create(user=admin_user, name="hf-token", value=HF_VALUE)
    Secret.objects.bulk_create([Secret(name="bulk", value=PLAIN_VALUE)])
    Secret.objects.filter(name="bulk").update(value="updated in bulk 77")

    stored = raw_values("deployments_secret")
    assert len(stored) == 2
    assert all(v.startswith("gAAAAA") for v in stored)
    assert not any(text in v for v in stored for text in (HF_VALUE, PLAIN_VALUE, "updated in bulk 77"))
    assert Fernet(key).decrypt(stored[0].encode()).decode() == HF_VALUE
    reread = Secret.objects.get(pk=secret.pk)
    assert isinstance(reread.value, SealedValue)
    assert HF_VALUE not in repr(reread.value) and stored[0] not in str(reread.value)
    assert reread.plaintext() == HF_VALUE
    assert Secret.objects.get(name="bulk").plaintext() == "updated in bulk 77"


def test_it_keeps_retired_values_encrypted_too(db, key, admin_user):
    secret = services.secret_create(user=admin_user, name="plain", value=PLAIN_VALUE)
    secret.description = "same value, new description"
    secret.save()
    assert not RetiredSecretValue.objects.exists()

    services.secret_update(secret=secret, user=admin_user, value="second value 12")
    Secret.objects.get(name="plain").delete()

    stored = raw_values("deployments_retiredsecretvalue")
    assert len(stored) == 2 and not any(PLAIN_VALUE in v or "second value 12" in v for v in stored)
    assert sorted(r.plaintext() for r in RetiredSecretValue.objects.all()) == [PLAIN_VALUE, "second value 12"]


def test_it_does_not_use_django_secret_key(db, key, settings, admin_user):
    services.secret_create(user=admin_user, name="hf-token", value=HF_VALUE)
    settings.SECRET_KEY = "rotated-django-secret-key-0123456789"

    assert Secret.objects.get(name="hf-token").plaintext() == HF_VALUE


# --- launch -------------------------------------------------------------------------------


@pytest.fixture
def node(db):
    """A CPU-only node (no numactl) whose NUMA node holds the CPUs this test may use."""
    usable = sorted(os.sched_getaffinity(0))
    node = Node.objects.create(name="here", hostname="here", cpu_count=len(usable), tools={})
    NumaNode.objects.create(node=node, index=0, cpus=format_cpulist(usable))
    return node


def sim_recipe_with_secret(*, node: Node, user, name: str = "with-secret"):
    """A single ``sim`` server (the pattern of ``test_agent_supervision``) with ``HF_TOKEN``
    from the stored secret ``hf-token``."""
    (port,) = free_ports(1)
    spec = {
        "model": {"name": "sim/tiny"},
        "served_model_name": "tiny",
        "roles": {"single": {"cpus": str(sorted(os.sched_getaffinity(0))[0]), "host": "127.0.0.1", "port": port,
                             "flags": {"time-scale": 0.05}}},
        "sim": {"profile": "demo-fast"},
        "startup_timeout_s": 30,
        "stop_grace_s": 5,
        "secrets": {"HF_TOKEN": "hf-token"},
    }
    return services.recipe_create(user=user, name=name, engine="sim", topology="single", node=node, spec=spec)


def environ_of(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.decode(errors="replace").split("=", 1) for item in raw.split(b"\0") if b"=" in item)


def test_a_launched_engine_gets_the_plaintext_in_its_environment(node, key, admin_user, operator, settings, tmp_path):
    settings.CEILING_LOG_DIR = tmp_path / "engines"
    services.secret_create(user=admin_user, name="hf-token", value=HF_VALUE)
    recipe = sim_recipe_with_secret(node=node, user=operator)
    deployment = services.deployment_create(recipe=recipe, user=operator)
    try:
        assert deployment_launch(deployment_id=deployment.pk) == "launched"

        envs = wait_for(lambda: [e for e in map(environ_of, engine_pids_of(deployment)) if "HF_TOKEN" in e],
                        timeout_s=15, what="the engine's environment")
        assert [e["HF_TOKEN"] for e in envs] == [HF_VALUE]
        row = deployment.processes.get()
        assert row.env_redacted["HF_TOKEN"] == REDACTED
        assert HF_VALUE not in str(row.argv)
    finally:
        deployment_teardown(deployment_id=deployment.pk)


def test_a_launch_with_the_wrong_key_fails_the_deployment_naming_the_secret(node, key, settings, admin_user, operator,
                                                                           tmp_path):
    settings.CEILING_LOG_DIR = tmp_path / "engines"
    services.secret_create(user=admin_user, name="hf-token", value=HF_VALUE)
    recipe = sim_recipe_with_secret(node=node, user=operator)
    deployment = services.deployment_create(recipe=recipe, user=operator)
    token = raw_values("deployments_secret")[0]
    settings.CEILING_SECRETS_KEY = Fernet.generate_key().decode()

    assert deployment_launch(deployment_id=deployment.pk) == "failed"

    deployment.refresh_from_db()
    assert deployment.status == "failed"
    assert "secret 'hf-token' cannot be decrypted with the key from CEILING_SECRETS_KEY" in deployment.reason
    assert token not in deployment.reason and HF_VALUE not in deployment.reason
    assert not deployment.processes.exclude(pid=None).exists()


# --- redaction ------------------------------------------------------------------------------


def test_redaction_masks_current_and_retired_values_read_from_the_database(db, key, admin_user, fresh_process):
    services.secret_create(user=admin_user, name="hf-token", value=HF_VALUE)
    secret = services.secret_create(user=admin_user, name="plain", value=PLAIN_VALUE)
    services.secret_update(secret=secret, user=admin_user, value="replacement value 31")
    # a process started after the rotation: nothing in memory, only the encrypted rows
    redaction._known_values.clear()
    redaction.stored_secret_values_invalidate()

    text = redact_text(f"a {HF_VALUE} b {PLAIN_VALUE} c replacement value 31 d")

    assert text == f"a {REDACTED} b {REDACTED} c {REDACTED} d"


def test_a_log_that_could_not_be_masked_is_not_served_and_the_error_is_logged_once(
        db, key, settings, admin_user, fresh_process, caplog, tmp_path, viewer_api, viewer):
    settings.CEILING_LOG_DIR = tmp_path / "logs"
    services.secret_create(user=admin_user, name="hf-token", value=HF_VALUE)
    services.secret_create(user=admin_user, name="plain", value=PLAIN_VALUE)
    row = deployment_row_create(recipe=recipe_row_create(node=cpu_node_create())).processes.get()
    log_path = tmp_path / "logs" / "single0.log"
    log_path.parent.mkdir()
    log_path.write_text(f"login as {PLAIN_VALUE}\n", encoding="utf-8")
    row.log_path = str(log_path)
    row.save(update_fields=["log_path"])
    settings.CEILING_SECRETS_KEY = Fernet.generate_key().decode()
    redaction._known_values.clear()

    with caplog.at_level(logging.ERROR, logger="controlplane.redaction"):
        tail = viewer_api.get(f"/api/processes/{row.pk}/log/?lines=5")
        download = viewer_api.get(f"/api/processes/{row.pk}/log/download/")
        page = Client()
        page.force_login(viewer)
        panel = page.get(reverse("deployments:process-log", args=[row.deployment_id, row.pk]))
        page_download = page.get(reverse("deployments:process-log-download", args=[row.deployment_id, row.pk]))

    for response in (tail, download):
        assert response.status_code == 503
        assert response.json()["code"] == "secrets_unmaskable"
        assert "'hf-token', 'plain' cannot be decrypted" in response.json()["detail"]
    assert panel.status_code == 200
    assert PLAIN_VALUE not in panel.content.decode() and "could not be masked" in panel.content.decode()
    assert page_download.status_code == 503 and PLAIN_VALUE.encode() not in page_download.content
    errors = [r.getMessage() for r in caplog.records if r.name == "controlplane.redaction"]
    assert len(errors) == 2  # one per value, once per process
    assert any("secret 'plain' cannot be decrypted with the key from CEILING_SECRETS_KEY" in e for e in errors)
    assert not any(v in e for e in errors for v in raw_values("deployments_secret"))


# --- wrong or malformed key -------------------------------------------------------------------


def test_the_wrong_key_gives_an_error_naming_the_secret_and_the_key_source(db, key, settings, admin_user, tmp_path):
    services.secret_create(user=admin_user, name="hf-token", value=HF_VALUE)
    token = raw_values("deployments_secret")[0]
    settings.CEILING_SECRETS_KEY = Fernet.generate_key().decode()

    with pytest.raises(SecretUnreadable) as info:
        Secret.objects.get(name="hf-token").plaintext()
    message = str(info.value)
    assert "secret 'hf-token' cannot be decrypted with the key from CEILING_SECRETS_KEY" in message
    assert token not in message and settings.CEILING_SECRETS_KEY not in message

    settings.CEILING_SECRETS_KEY = ""
    settings.CEILING_SECRETS_KEY_FILE = tmp_path / "other.key"
    with pytest.raises(SecretUnreadable, match=rf"key from key file {tmp_path}/other.key"):
        Secret.objects.get(name="hf-token").plaintext()


def test_pages_that_list_secrets_work_with_the_wrong_key(db, key, settings, admin_user, admin_api):
    services.secret_create(user=admin_user, name="hf-token", value=HF_VALUE)
    settings.CEILING_SECRETS_KEY = Fernet.generate_key().decode()
    client = Client()
    client.force_login(admin_user)

    assert client.get(reverse("admin:deployments_secret_changelist")).status_code == 200
    assert client.get(reverse("admin:deployments_secret_change", args=[Secret.objects.get().pk])).status_code == 200
    assert admin_api.get("/api/secrets/").json()["results"][0]["name"] == "hf-token"
    secret = Secret.objects.get()
    secret.description = "edited without the key"
    secret.save()  # the sealed value is written back as it was
    Secret.objects.get().delete()  # and retired as stored
    settings.CEILING_SECRETS_KEY = key
    assert RetiredSecretValue.objects.get().plaintext() == HF_VALUE


def test_a_malformed_key_is_a_system_check_error_and_a_clear_refusal(db, settings, admin_api):
    settings.CEILING_SECRETS_KEY = "not-a-fernet-key"

    (error,) = secretbox.secrets_key_check()
    assert error.id == "ceiling.E001"
    assert "CEILING_SECRETS_KEY is not a Fernet key" in error.msg and "not-a-fernet-key" not in error.msg
    with pytest.raises(SecretsKeyError, match="CEILING_SECRETS_KEY is not a Fernet key"):
        secretbox.seal("anything")
    response = admin_api.post("/api/secrets/", {"name": "hf-token", "value": HF_VALUE}, format="json")
    assert response.status_code == 503
    assert "CEILING_SECRETS_KEY is not a Fernet key" in response.json()["detail"]
    assert not Secret.objects.exists()


# --- the key file -----------------------------------------------------------------------------


def test_the_key_file_is_created_0600_on_first_use_and_reused(settings, tmp_path, monkeypatch):
    settings.CEILING_SECRETS_KEY = ""
    path = tmp_path / "var" / "secrets.key"
    settings.CEILING_SECRETS_KEY_FILE = path
    assert secretbox.secrets_key_check() == []  # a missing file is made on first use, not by a check

    token = secretbox.seal(PLAIN_VALUE)

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    first = path.read_bytes()
    Fernet(first.strip())  # a valid key
    monkeypatch.setattr(secretbox, "_fernets", {})  # a process started later
    assert secret_plaintext(SealedValue(token), name="plain") == PLAIN_VALUE
    assert secretbox.seal("again") and path.read_bytes() == first
    assert secretbox.secrets_key_check() == []
    path.chmod(0o644)
    assert [m.id for m in secretbox.secrets_key_check()] == ["ceiling.W001"]


def test_a_reader_waits_for_a_key_file_being_written(tmp_path):
    path = tmp_path / "secrets.key"
    path.touch(mode=0o600)  # created by another process, its key not written yet
    key = Fernet.generate_key()
    writer = threading.Timer(0.2, lambda: path.write_bytes(key + b"\n"))
    writer.start()
    try:
        assert key_file_load(path) == key
    finally:
        writer.join()


def test_a_process_that_loses_the_creation_race_uses_the_winners_key(tmp_path, monkeypatch):
    path = tmp_path / "secrets.key"
    winner = Fernet.generate_key()
    real_read = secretbox._key_file_read
    looks: list[Path] = []

    def read(p: Path) -> bytes:
        looks.append(p)
        if len(looks) == 1:
            path.write_bytes(winner + b"\n")  # another process creates it right after this one looked
            raise FileNotFoundError(p)
        return real_read(p)

    monkeypatch.setattr(secretbox, "_key_file_read", read)

    assert key_file_load(path) == winner
    assert path.read_bytes() == winner + b"\n"  # O_EXCL refused to write a second key


CONTENDER = """
import sys, time
from pathlib import Path
from controlplane.secretbox import key_file_load
path, go, ready = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
ready.touch()
while not go.exists():
    time.sleep(0.001)
print(key_file_load(path).decode())
"""


def test_processes_starting_at_once_agree_on_one_key(tmp_path):
    contenders = 6
    for attempt in range(3):
        path, go = tmp_path / f"run{attempt}" / "secrets.key", tmp_path / f"go{attempt}"
        ready = [tmp_path / f"ready{attempt}-{i}" for i in range(contenders)]
        procs = [subprocess.Popen([sys.executable, "-c", CONTENDER, str(path), str(go), str(ready[i])], cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i in range(contenders)]
        wait_for(lambda: all(r.exists() for r in ready) or any(p.poll() is not None for p in procs),
                 timeout_s=60, what="every contender to be ready")
        go.touch()  # all of them are polling for this now: their first uses start together
        outputs = [p.communicate(timeout=60) for p in procs]
        assert all(p.returncode == 0 for p in procs), [err for _, err in outputs]
        keys = {out.strip() for out, _ in outputs}
        assert keys == {path.read_text().strip()}
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


# --- the migration ----------------------------------------------------------------------------


def migrate_to(target: str):
    """Migrate the deployments app to ``target``; returns the historical apps there."""
    executor = MigrationExecutor(connection)
    executor.migrate([("deployments", target)])
    executor.loader.build_graph()
    return executor.loader.project_state([("deployments", target)]).apps


@pytest.fixture
def at_0005(transactional_db, key):
    """The database at the last migration before encryption, put back to the latest after."""
    apps = migrate_to(BEFORE)
    yield apps
    MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def test_the_migration_encrypts_existing_rows_and_its_reverse_decrypts_them(at_0005, key):
    old_secret = at_0005.get_model("deployments", "Secret")
    old_retired = at_0005.get_model("deployments", "RetiredSecretValue")
    old_secret.objects.create(name="hf-token", value=HF_VALUE)
    old_retired.objects.create(name="plain", value=PLAIN_VALUE)
    updated_at = old_secret.objects.get().updated_at

    migrate_to(AFTER)

    assert raw_values("deployments_secret")[0].startswith("gAAAAA")
    assert HF_VALUE not in raw_values("deployments_secret")[0]
    assert PLAIN_VALUE not in raw_values("deployments_retiredsecretvalue")[0]
    assert Secret.objects.get().plaintext() == HF_VALUE
    assert Secret.objects.get().updated_at == updated_at
    assert RetiredSecretValue.objects.get().plaintext() == PLAIN_VALUE

    migrate_to(BEFORE)

    assert raw_values("deployments_secret") == [HF_VALUE]
    assert raw_values("deployments_retiredsecretvalue") == [PLAIN_VALUE]


def test_the_reverse_migration_refuses_a_value_the_key_cannot_open(at_0005, key, settings):
    at_0005.get_model("deployments", "Secret").objects.create(name="hf-token", value=HF_VALUE)
    migrate_to(AFTER)
    token = raw_values("deployments_secret")[0]
    settings.CEILING_SECRETS_KEY = Fernet.generate_key().decode()

    with pytest.raises(SecretUnreadable, match="secret 'hf-token' cannot be decrypted with the key from CEILING_SECRETS_KEY"):
        migrate_to(BEFORE)

    assert raw_values("deployments_secret") == [token]  # nothing written
    settings.CEILING_SECRETS_KEY = key
    assert Secret.objects.get().plaintext() == HF_VALUE


def test_production_requires_the_key_in_the_environment():
    """In production a key file would live in one container or host only: the key is required."""
    env = {k: v for k, v in os.environ.items() if k != "CEILING_SECRETS_KEY"}
    env.update(CEILING_ENV="production", SECRET_KEY="production-secret-key-0123456789",
               ALLOWED_HOSTS="ceiling.example", DJANGO_SETTINGS_MODULE="controlplane.settings")
    proc = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "environment variable CEILING_SECRETS_KEY is required" in proc.stderr

    env["CEILING_SECRETS_KEY"] = Fernet.generate_key().decode()
    proc = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
