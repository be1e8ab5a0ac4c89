"""Encryption at rest of stored secret values (:class:`deployments.models.Secret` and
:class:`deployments.models.RetiredSecretValue`).

Values are encrypted with Fernet from ``cryptography`` (AES-128-CBC with an HMAC-SHA256 tag and
a random IV per value; https://github.com/fernet/spec). The key is never Django's
``SECRET_KEY``, so rotating that loses no secret. It is, in this order:

* ``settings.CEILING_SECRETS_KEY`` (environment variable ``CEILING_SECRETS_KEY``): a Fernet key,
  32 url-safe base64-encoded bytes, e.g. the output of
  ``python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'``;
* otherwise the key file ``settings.CEILING_SECRETS_KEY_FILE`` (``<CEILING_VAR_DIR>/secrets.key``),
  created with a new key on first use, mode 0600, by exactly one process (:func:`key_file_load`).

A column of :class:`SealedTextField` holds the Fernet token (ASCII, ``gAAAAA...``), never the
plaintext: a plain ``str`` assigned to the field is encrypted whenever the row is written
(``save``, ``create``, ``bulk_create``, ``update``). A value read back from the database is a
:class:`SealedValue`, which carries the token and shows neither it nor the plaintext when
formatted; the plaintext comes only from :func:`secret_plaintext` (the models' ``plaintext()``),
which raises :class:`SecretUnreadable`, naming the secret and the key source, when the key does
not open the token. A sealed value is never a ``str``, so it cannot end up in an engine's
environment by mistake.
"""
from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import models

from controlplane.errors import CeilingError, InvalidInput

#: The environment variable (and setting) that holds the key when the key file is not used.
KEY_SETTING = "CEILING_SECRETS_KEY"
#: Seconds a reader waits for a key file that another process has created but not yet written.
KEY_FILE_WAIT_S = 2.0
KEY_HELP = ("a Fernet key is 32 url-safe base64-encoded bytes, e.g. the output of "
            "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'")

_cache_lock = threading.Lock()
# (CEILING_SECRETS_KEY, key file path) -> (key file identity, Fernet): the key file is read once
# per process and again only when it was replaced.
_fernets: dict[tuple[str, str], tuple[tuple[int, int, int] | None, Fernet]] = {}


class SecretsKeyError(ImproperlyConfigured, CeilingError):
    """The encryption key of stored secrets cannot be had: ``CEILING_SECRETS_KEY`` or the key
    file is not a Fernet key, or the key file cannot be read or created. The message names the
    source and never the key. Also a :class:`~controlplane.errors.CeilingError`, so the API
    answers it as a 503 with the message rather than a bare 500."""

    code = "secrets_key"
    http_status = 503


class SecretUnreadable(InvalidInput):
    """A stored secret value cannot be decrypted (a different key than the one it was sealed
    with, a damaged token, or no usable key). ``name`` is the secret's name, ``source`` where the
    key came from. A subclass of :class:`~controlplane.errors.InvalidInput` (under ``secrets``), so
    a caller that refuses a launch plan on invalid input (the node agent) fails the deployment
    with this message instead of crashing."""

    code = "secret_unreadable"

    def __init__(self, *, name: str, source: str, reason: str):
        self.name, self.source = name, source
        super().__init__({"secrets": [
            f"secret {name!r} cannot be decrypted with the key from {source}: {reason} "
            f"(use the key the secret was stored with, or store the secret again)"
        ]})


class SealedValue:
    """A secret value as stored: the Fernet ``token`` (a ``str``). Formatting it shows neither
    the token nor the plaintext; two sealed values are equal when their tokens are."""

    __slots__ = ("token",)

    def __init__(self, token: str):
        self.token = token

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SealedValue) and other.token == self.token

    def __hash__(self) -> int:
        return hash(self.token)

    def __bool__(self) -> bool:
        return bool(self.token)

    def __repr__(self) -> str:
        return "<sealed secret value>"

    __str__ = __repr__


def key_source() -> str:
    """Where the key of stored secrets comes from, for messages: ``CEILING_SECRETS_KEY`` or
    ``key file <path>``."""
    if getattr(settings, KEY_SETTING, ""):
        return KEY_SETTING
    return f"key file {settings.CEILING_SECRETS_KEY_FILE}"


def _fernet_of(key: str | bytes, *, source: str) -> Fernet:
    """A Fernet of ``key``. Raises :class:`SecretsKeyError` naming ``source`` (never the key)
    when it is not 32 url-safe base64-encoded bytes."""
    try:
        return Fernet(key.strip() if isinstance(key, (str, bytes)) else key)
    except (ValueError, TypeError):
        raise SecretsKeyError(f"{source} is not a Fernet key: {KEY_HELP}") from None


def _key_file_read(path: Path) -> bytes:
    """The key in ``path``, waiting up to :data:`KEY_FILE_WAIT_S` while it is empty (another
    process created it a moment ago and is writing it). Raises ``FileNotFoundError`` when it
    does not exist and :class:`SecretsKeyError` when it cannot be read or stays empty."""
    deadline = time.monotonic() + KEY_FILE_WAIT_S
    while True:
        try:
            data = path.read_bytes().strip()
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise SecretsKeyError(f"key file {path} cannot be read: {exc.strerror or exc}") from None
        if data:
            return data
        if time.monotonic() >= deadline:
            raise SecretsKeyError(f"key file {path} is empty; restore it from a backup, or delete it to "
                                  "have a new key made (only when no secret was stored with it)")
        time.sleep(0.02)


def key_file_load(path: Path) -> bytes:
    """The key in the key file ``path``, created with a new Fernet key when missing.

    Creation is atomic across processes: the file is opened with ``O_CREAT | O_EXCL`` (one
    creator wins, POSIX ``open(2)``) and mode 0600, the key written and fsynced, and every
    process, the creator included, returns what it then reads back from the file; a process
    that lost the race reads the winner's key, so two processes starting at once never use two
    keys. The directory is created 0700 when missing.

    Raises:
        SecretsKeyError: the file or its directory cannot be created, read or written.
    """
    try:
        return _key_file_read(path)
    except FileNotFoundError:
        pass
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    except FileExistsError:
        fd = None
    except OSError as exc:
        raise SecretsKeyError(f"key file {path} cannot be created: {exc.strerror or exc}") from None
    if fd is not None:
        try:
            os.fchmod(fd, 0o600)  # the umask only narrows the mode; say it outright anyway
            os.write(fd, Fernet.generate_key() + b"\n")
            os.fsync(fd)
        except OSError as exc:
            raise SecretsKeyError(f"key file {path} cannot be written: {exc.strerror or exc}") from None
        finally:
            os.close(fd)
    try:
        return _key_file_read(path)
    except FileNotFoundError:
        raise SecretsKeyError(f"key file {path} vanished right after it was created") from None


def _file_identity(path: str) -> tuple[int, int, int] | None:
    """``(inode, mtime ns, size)`` of the key file, None when it cannot be stat'ed: a key file
    replaced by a key rotation (:func:`deployments.secret_keys.secrets_key_rotate`) has a new
    identity, so every process reads the new key on its next use without a restart."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def secrets_fernet() -> Fernet:
    """The Fernet of the configured key (see the module docstring), cached per process and per
    key setting; a key file is read again when it was replaced (a rotation). Creates the key
    file on first use when ``CEILING_SECRETS_KEY`` is not set.

    Raises:
        SecretsKeyError: the key is malformed, or the key file cannot be read or created.
    """
    env_key = getattr(settings, KEY_SETTING, "") or ""
    path = "" if env_key else str(settings.CEILING_SECRETS_KEY_FILE)
    identity = _file_identity(path) if path else None
    with _cache_lock:
        cached = _fernets.get((env_key, path))
    if cached is not None and cached[0] == identity:
        return cached[1]
    if env_key:
        fernet = _fernet_of(env_key, source=KEY_SETTING)
    else:
        fernet = _fernet_of(key_file_load(Path(path)), source=f"key file {path}")
        identity = _file_identity(path)
    with _cache_lock:
        _fernets[(env_key, path)] = (identity, fernet)
    return fernet


def fernet_of_key(key: str | bytes, *, source: str) -> Fernet:
    """A Fernet of ``key`` (a new key given to a rotation). Raises :class:`SecretsKeyError`
    naming ``source``, never the key, when it is not a Fernet key."""
    return _fernet_of(key, source=source)


def seal(plaintext: str) -> str:
    """The Fernet token of ``plaintext`` (UTF-8) as stored in a :class:`SealedTextField`.

    Raises:
        SecretsKeyError: no usable key (see :func:`secrets_fernet`).
    """
    return secrets_fernet().encrypt(plaintext.encode("utf-8")).decode("ascii")


def secret_plaintext(value: SealedValue | str | None, *, name: str) -> str:
    """The plaintext of a stored secret value: the one accessor every reader that needs the
    plaintext goes through (the node agent building an engine's environment, redaction, the
    signal handlers comparing an old value with a new one).

    ``value`` is a field value of a :class:`SealedTextField`: a :class:`SealedValue` read from
    the database is decrypted; a ``str`` is a plaintext assigned in this process and not read
    back since, returned as it is; ``None`` gives "". ``name`` is the secret's name, for the
    error.

    Raises:
        SecretUnreadable: the token cannot be decrypted with the configured key, or there is no
            usable key; the message names the secret and the key source, never the token.
    """
    if value is None:
        return ""
    if not isinstance(value, SealedValue):
        return str(value)
    source = key_source()
    try:
        fernet = secrets_fernet()
    except SecretsKeyError as exc:
        raise SecretUnreadable(name=name, source=source, reason=str(exc)) from None
    try:
        return fernet.decrypt(value.token.encode("ascii")).decode("utf-8")
    except (InvalidToken, UnicodeError):
        raise SecretUnreadable(name=name, source=source,
                               reason="the key does not match or the stored value is damaged") from None


class SealedTextField(models.TextField):
    """A text column that holds its value encrypted (see the module docstring).

    In Python the value is a plaintext ``str`` (assigned, sealed when written) or a
    :class:`SealedValue` (read from the database, written back as it is, so saving a row
    without touching the value needs no key). A lookup on the column compares tokens, and a new
    token differs on every write, so filtering by value finds nothing: only read and write it.
    Serialisation (``dumpdata``) writes the token.
    """

    description = "Text encrypted at rest with Fernet"

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> SealedValue | None:
        return None if value is None else SealedValue(value)

    def to_python(self, value: Any) -> SealedValue | str | None:
        if value is None or isinstance(value, SealedValue):
            return value
        return str(value)

    def get_prep_value(self, value: Any) -> str | None:
        value = models.Field.get_prep_value(self, value)
        if value is None:
            return None
        if isinstance(value, SealedValue):
            return value.token
        return seal(str(value))

    def value_to_string(self, obj: models.Model) -> str:
        return self.get_prep_value(self.value_from_object(obj)) or ""


@checks.register(checks.Tags.security)
def secrets_key_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """System check of the key of stored secrets, run by every ``manage.py`` command that runs
    checks (``migrate``, ``runserver``, ``check``): ``CEILING_SECRETS_KEY`` when set must be a
    Fernet key (``ceiling.E001``); an existing key file must be readable and hold one
    (``ceiling.E002``) and should not be readable by group or others (``ceiling.W001``). A
    missing key file is fine: it is created on first use, not by a check."""
    env_key = getattr(settings, KEY_SETTING, "") or ""
    if env_key:
        try:
            _fernet_of(env_key, source=KEY_SETTING)
        except SecretsKeyError as exc:
            return [checks.Error(str(exc), hint="Set CEILING_SECRETS_KEY to a Fernet key, or unset it to use "
                                 "the key file.", id="ceiling.E001")]
        return []
    path = Path(settings.CEILING_SECRETS_KEY_FILE)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return []
    except OSError as exc:
        return [checks.Error(f"key file {path} cannot be read: {exc.strerror or exc}", id="ceiling.E002")]
    messages: list[checks.CheckMessage] = []
    try:
        _fernet_of(_key_file_read(path), source=f"key file {path}")
    except (SecretsKeyError, FileNotFoundError) as exc:
        messages.append(checks.Error(str(exc), id="ceiling.E002"))
    if stat.S_IMODE(mode) & 0o077:
        messages.append(checks.Warning(f"key file {path} is readable by other users (mode "
                                       f"{stat.S_IMODE(mode):04o})", hint=f"chmod 600 {path}", id="ceiling.W001"))
    return messages
