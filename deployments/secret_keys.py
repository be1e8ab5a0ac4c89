"""Rotation of the key that encrypts stored secret values (:mod:`controlplane.secretbox`).

:func:`secrets_key_rotate` re-encrypts every stored value, current (:class:`Secret`) and earlier
(:class:`RetiredSecretValue`), from the configured key to a new one, in one database
transaction: every value is decrypted first, and one that the current key does not open stops
the rotation with its name before anything is written, so a rotation never leaves some values
under one key and some under another.

Where the key lives decides the rest:

* **key file** (``CEILING_SECRETS_KEY`` unset): the new key is written beside the key file as
  ``<key file>.new`` (mode 0600, fsynced) before the transaction, and renamed over the key file
  (``rename(2)``, atomic) after it commits. Every process notices the replaced file on its next
  use (:func:`controlplane.secretbox.secrets_fernet`), so nothing needs a restart. A rotation
  interrupted between the commit and the rename leaves ``<key file>.new`` holding the key the
  values are under; the next rotation finishes it (:func:`pending_rotation_finish`) before
  starting.
* **``CEILING_SECRETS_KEY``**: the command cannot change another process's environment. The
  values are re-encrypted under the new key, and every process must then be started with
  ``CEILING_SECRETS_KEY`` set to the new key (until then they cannot read the secrets, and say
  so by name: :class:`~controlplane.secretbox.SecretUnreadable`).

A value another process seals with the old key while the rotation runs (it read the key before
the file was replaced) is re-encrypted by a second pass after the rename.

Database backups taken before a rotation need the old key.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.db import transaction

from controlplane.secretbox import (
    KEY_SETTING,
    SealedValue,
    SecretsKeyError,
    SecretUnreadable,
    fernet_of_key,
    key_source,
    secrets_fernet,
)
from deployments.models import RetiredSecretValue, Secret


@dataclass(frozen=True)
class RotationResult:
    """What a rotation did: the number of values re-encrypted (current and earlier), where the
    new key now is (``key file <path>`` or ``CEILING_SECRETS_KEY``), and whether it finished an
    interrupted rotation first."""

    secrets: int
    retired_values: int
    key_destination: str
    finished_pending: bool = False


def _pending_path(key_file: Path) -> Path:
    return key_file.with_name(key_file.name + ".new")


def _tokens() -> list[tuple[type, int, str, SealedValue]]:
    rows: list[tuple[type, int, str, SealedValue]] = []
    for model in (Secret, RetiredSecretValue):
        for pk, name, value in model.objects.select_for_update().order_by("pk").values_list("pk", "name", "value"):
            rows.append((model, pk, name, value))
    return rows


def _opens_all(fernet: Fernet) -> bool:
    """Whether ``fernet`` decrypts every stored value (True when none is stored)."""
    for model in (Secret, RetiredSecretValue):
        for value in model.objects.values_list("value", flat=True):
            if not isinstance(value, SealedValue):
                continue
            try:
                fernet.decrypt(value.token.encode("ascii"))
            except InvalidToken:
                return False
    return True


def _write_new_key_file(path: Path, key: bytes) -> None:
    """``key`` into ``path``, created exclusively with mode 0600 and fsynced."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    except FileExistsError:
        raise SecretsKeyError(f"{path} exists: another rotation is running, or an interrupted one left it "
                              "(run the rotation again to finish or discard it)") from None
    except OSError as exc:
        raise SecretsKeyError(f"{path} cannot be created: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, key.strip() + b"\n")
        os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise SecretsKeyError(f"{path} cannot be written: {exc.strerror or exc}") from None
    os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _reencrypt_stragglers(*, old: Fernet, new: Fernet) -> dict[type, int]:
    """Re-encrypt, under ``new``, each stored value that ``new`` does not open and ``old`` does;
    a value neither opens is left as it is (it was not readable before either)."""
    counts = {Secret: 0, RetiredSecretValue: 0}
    with transaction.atomic():
        for model, pk, _name, value in _tokens():
            if not isinstance(value, SealedValue):
                continue
            token = value.token.encode("ascii")
            try:
                new.decrypt(token)
                continue
            except InvalidToken:
                pass
            try:
                plain = old.decrypt(token)
            except InvalidToken:
                continue
            model.objects.filter(pk=pk).update(value=SealedValue(new.encrypt(plain).decode("ascii")))
            counts[model] += 1
    return counts


def pending_rotation_finish(key_file: Path) -> bool:
    """Finish or discard an interrupted rotation of the key file ``key_file``.

    When ``<key file>.new`` exists and its key opens every stored value while the key file's
    does not (the transaction committed, the rename did not happen), it is renamed over the key
    file and True is returned; otherwise (the transaction never committed) it is deleted and
    False is returned. Nothing happens when there is no ``.new`` file.

    Raises:
        SecretsKeyError: the ``.new`` file is not a Fernet key, or neither key opens every value.
    """
    pending = _pending_path(key_file)
    if not pending.exists():
        return False
    new = fernet_of_key(pending.read_bytes(), source=f"key file {pending}")
    if _opens_all(secrets_fernet()):
        pending.unlink()
        return False
    if not _opens_all(new):
        raise SecretsKeyError(f"neither key file {key_file} nor {pending} opens every stored secret value; "
                              "restore the key the values were stored with")
    os.replace(pending, key_file)
    _fsync_dir(key_file.parent)
    return True


def secrets_key_rotate(*, new_key: bytes) -> RotationResult:
    """Re-encrypt every stored secret value under ``new_key`` (a Fernet key, 32 url-safe
    base64-encoded bytes) and, with the key file, make it the key file's key.

    Raises:
        SecretsKeyError: ``new_key`` is not a Fernet key, equals the current key, or the key
            file's ``.new`` file cannot be written; nothing was changed.
        SecretUnreadable: a stored value cannot be decrypted with the current key (it names the
            secret); nothing was changed.
    """
    env_mode = bool(getattr(settings, KEY_SETTING, ""))
    key_file = None if env_mode else Path(settings.CEILING_SECRETS_KEY_FILE)
    finished = pending_rotation_finish(key_file) if key_file is not None else False
    new = fernet_of_key(new_key, source="the new key")
    old = secrets_fernet()
    probe = old.encrypt(b"probe")
    try:
        new.decrypt(probe)
    except InvalidToken:
        pass
    else:
        raise SecretsKeyError("the new key is the key in use now; give a different one")
    if key_file is not None:
        _write_new_key_file(_pending_path(key_file), new_key)
    try:
        counts = {Secret: 0, RetiredSecretValue: 0}
        with transaction.atomic():
            rows = _tokens()
            fresh: list[tuple[type, int, str]] = []
            for model, pk, name, value in rows:
                if not isinstance(value, SealedValue):
                    continue
                try:
                    plain = old.decrypt(value.token.encode("ascii"))
                except InvalidToken:
                    raise SecretUnreadable(name=name, source=key_source(),
                                           reason="the key does not match or the stored value is damaged") from None
                fresh.append((model, pk, new.encrypt(plain).decode("ascii")))
            for model, pk, token in fresh:
                model.objects.filter(pk=pk).update(value=SealedValue(token))
                counts[model] += 1
    except BaseException:
        if key_file is not None:
            _pending_path(key_file).unlink(missing_ok=True)
        raise
    if key_file is not None:
        os.replace(_pending_path(key_file), key_file)
        _fsync_dir(key_file.parent)
    # A value another process sealed with the old key while this ran (it read the key before
    # the file was replaced) is re-encrypted too: after the rename no process seals with the old
    # key any more, so one pass over what the new key does not open catches them.
    stragglers = _reencrypt_stragglers(old=old, new=new)
    counts[Secret] += stragglers[Secret]
    counts[RetiredSecretValue] += stragglers[RetiredSecretValue]
    return RotationResult(
        secrets=counts[Secret],
        retired_values=counts[RetiredSecretValue],
        key_destination=KEY_SETTING if env_mode else f"key file {key_file}",
        finished_pending=finished,
    )
