"""Rotating the key of stored secrets: every value, current and earlier, is re-encrypted in one
transaction; the key file is replaced only after it commits, other processes read the new file
without a restart, and a failure or an interruption loses nothing. Real database, real key file,
the real management command."""
from __future__ import annotations

import io
import os
import stat

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command
from django.db import connection

from controlplane import secretbox
from controlplane.secretbox import SecretsKeyError, SecretUnreadable
from deployments import services
from deployments.models import RetiredSecretValue, Secret
from deployments.secret_keys import pending_rotation_finish, secrets_key_rotate

VALUES = {"hf-token": "hf_RotateMe0123456789abcdef", "db-password": "correct horse battery 99"}


def raw(table: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT value FROM {table} ORDER BY id")
        return [row[0] for row in cursor.fetchall()]


@pytest.fixture
def key_file(settings, tmp_path):
    settings.CEILING_SECRETS_KEY = ""
    settings.CEILING_SECRETS_KEY_FILE = tmp_path / "var" / "secrets.key"
    return settings.CEILING_SECRETS_KEY_FILE


@pytest.fixture
def stored(db, admin_user, key_file):
    """Two secrets, one of them changed once (so an earlier value is kept too)."""
    for name, value in VALUES.items():
        services.secret_create(user=admin_user, name=name, value="first " + value if name == "hf-token" else value)
    secret = Secret.objects.get(name="hf-token")
    secret.value = VALUES["hf-token"]
    secret.save()
    assert RetiredSecretValue.objects.count() == 1
    return key_file


def plaintexts() -> dict[str, str]:
    return {s.name: s.plaintext() for s in Secret.objects.all()}


def test_generate_re_encrypts_every_value_and_replaces_the_key_file(stored):
    old_key = stored.read_bytes().strip()
    old_tokens = raw("deployments_secret") + raw("deployments_retiredsecretvalue")
    out = io.StringIO()

    call_command("rotate_secrets_key", "--generate", stdout=out)

    assert "re-encrypted 2 secret value(s) and 1 earlier value(s)" in out.getvalue()
    new_key = stored.read_bytes().strip()
    assert new_key != old_key
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert not stored.with_name("secrets.key.new").exists()
    new_tokens = raw("deployments_secret") + raw("deployments_retiredsecretvalue")
    assert len(new_tokens) == 3 and not set(new_tokens) & set(old_tokens)
    # Every token opens with the new key only.
    for token in new_tokens:
        Fernet(new_key).decrypt(token.encode())
        with pytest.raises(Exception):
            Fernet(old_key).decrypt(token.encode())
    # This process had the old key cached; it read the replaced key file without being told,
    # as every other process (web, workers, agents) does on its next use.
    assert plaintexts() == VALUES
    assert RetiredSecretValue.objects.get().plaintext() == "first " + VALUES["hf-token"]


def test_new_key_file_with_env_key_re_encrypts_and_says_what_to_do(db, admin_user, settings, tmp_path):
    settings.CEILING_SECRETS_KEY = Fernet.generate_key().decode()
    for name, value in VALUES.items():
        services.secret_create(user=admin_user, name=name, value=value)
    new_key = Fernet.generate_key()
    path = tmp_path / "new.key"
    path.write_bytes(new_key + b"\n")
    out = io.StringIO()

    call_command("rotate_secrets_key", "--new-key-file", str(path), stdout=out)

    assert "re-encrypted 2 secret value(s) and 0 earlier value(s) under the new key (CEILING_SECRETS_KEY)" in out.getvalue()
    assert "set to the new key" in out.getvalue()
    with pytest.raises(SecretUnreadable, match="cannot be decrypted with the key from CEILING_SECRETS_KEY"):
        plaintexts()  # this process still has the old key: it says so by name, never shows a token
    settings.CEILING_SECRETS_KEY = new_key.decode()
    assert plaintexts() == VALUES
    with pytest.raises(CommandError, match="CEILING_SECRETS_KEY is set"):
        call_command("rotate_secrets_key", "--generate")


def test_a_value_the_current_key_cannot_open_stops_the_rotation_and_changes_nothing(stored):
    # One value sealed under some other key (a restore from another installation, say).
    stray = Fernet(Fernet.generate_key()).encrypt(b"not ours").decode()
    with connection.cursor() as cursor:
        cursor.execute("UPDATE deployments_secret SET value = %s WHERE name = %s", [stray, "db-password"])
    before_key = stored.read_bytes()
    before = raw("deployments_secret") + raw("deployments_retiredsecretvalue")

    with pytest.raises(CommandError, match="secret 'db-password' cannot be decrypted"):
        call_command("rotate_secrets_key", "--generate")

    assert stored.read_bytes() == before_key
    assert not stored.with_name("secrets.key.new").exists()
    assert raw("deployments_secret") + raw("deployments_retiredsecretvalue") == before


def test_bad_new_keys_are_refused_before_anything_changes(stored, tmp_path):
    before = raw("deployments_secret")
    bad = tmp_path / "bad.key"
    bad.write_text("not-a-key\n")
    with pytest.raises(CommandError, match="the new key is not a Fernet key"):
        call_command("rotate_secrets_key", "--new-key-file", str(bad))
    same = tmp_path / "same.key"
    same.write_bytes(stored.read_bytes())
    with pytest.raises(CommandError, match="the new key is the key in use now"):
        call_command("rotate_secrets_key", "--new-key-file", str(same))
    with pytest.raises(CommandError, match="cannot read the new key from"):
        call_command("rotate_secrets_key", "--new-key-file", str(tmp_path / "missing.key"))
    assert raw("deployments_secret") == before
    assert not stored.with_name("secrets.key.new").exists()


def test_an_interrupted_rotation_is_finished_by_the_next_one(stored, monkeypatch):
    """The transaction committed, the process died before the rename: the values are under the
    key in ``secrets.key.new``. The next rotation renames it into place first, then rotates."""
    real_replace = os.replace

    def die_before_rename(src, dst):
        raise KeyboardInterrupt("killed between the commit and the rename")

    monkeypatch.setattr(os, "replace", die_before_rename)
    with pytest.raises(KeyboardInterrupt):
        secrets_key_rotate(new_key=Fernet.generate_key())
    monkeypatch.setattr(os, "replace", real_replace)
    pending = stored.with_name("secrets.key.new")
    assert pending.exists()
    with pytest.raises(SecretUnreadable):
        plaintexts()  # the key file still holds the old key

    result = secrets_key_rotate(new_key=Fernet.generate_key())

    assert result.finished_pending and result.secrets == 2 and result.retired_values == 1
    assert not pending.exists()
    assert plaintexts() == VALUES


def test_a_pending_file_from_a_rotation_that_never_committed_is_discarded(stored):
    pending = stored.with_name("secrets.key.new")
    pending.write_bytes(Fernet.generate_key() + b"\n")
    assert pending_rotation_finish(stored) is False
    assert not pending.exists()
    assert plaintexts() == VALUES
    pending.write_text("garbage")
    with pytest.raises(SecretsKeyError, match="secrets.key.new is not a Fernet key"):
        pending_rotation_finish(stored)


def test_a_rotation_with_nothing_stored_still_replaces_the_key(db, key_file):
    secretbox.seal("creates the key file")
    old = key_file.read_bytes()
    result = secrets_key_rotate(new_key=Fernet.generate_key())
    assert (result.secrets, result.retired_values) == (0, 0)
    assert key_file.read_bytes() != old


def test_a_value_sealed_with_the_old_key_during_the_rotation_is_re_encrypted_too(stored, monkeypatch):
    """Another process seals a new secret with the old key it still holds while the rotation's
    transaction runs; the pass after the rename re-encrypts it."""
    import deployments.secret_keys as secret_keys

    old = secretbox.secrets_fernet()
    real_replace = os.replace

    def insert_then_replace(src, dst):
        late = old.encrypt(b"sealed by a slower process").decode()
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO deployments_secret (name, value, description, created_at, updated_at) "
                           "VALUES (%s, %s, '', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)", ["late", late])
        real_replace(src, dst)

    monkeypatch.setattr(secret_keys.os, "replace", insert_then_replace)
    result = secrets_key_rotate(new_key=Fernet.generate_key())
    assert result.secrets == 3
    assert Secret.objects.get(name="late").plaintext() == "sealed by a slower process"
