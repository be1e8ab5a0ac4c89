"""``manage.py rotate_secrets_key (--generate | --new-key-file PATH)``: re-encrypt every stored
secret value under a new key (:func:`deployments.secret_keys.secrets_key_rotate`).

``--generate`` makes a new Fernet key (key file only: it becomes the key file's key).
``--new-key-file PATH`` reads the new key from a file, ``-`` for standard input; a key is never
taken on the command line, where ``ps`` would show it. With ``CEILING_SECRETS_KEY`` set, the
command re-encrypts and then says to start every process with the new key. Exit status 1 with
the reason when nothing could be changed.
"""
from __future__ import annotations

import sys
from pathlib import Path

from cryptography.fernet import Fernet
from django.conf import settings
from django.core.management.base import CommandError

from controlplane.commands import CeilingCommand
from controlplane.errors import InvalidInput
from controlplane.secretbox import KEY_SETTING, SecretsKeyError
from deployments.secret_keys import secrets_key_rotate


class Command(CeilingCommand):
    help = "Re-encrypt every stored secret value under a new key (the key file's, or for CEILING_SECRETS_KEY)."

    def add_arguments(self, parser):
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--generate", action="store_true",
                           help="make a new key and write it to the key file (not with CEILING_SECRETS_KEY)")
        group.add_argument("--new-key-file", metavar="PATH",
                           help="read the new Fernet key from PATH ('-': standard input)")

    def handle(self, *args, generate: bool, new_key_file: str | None, **options):
        env_mode = bool(getattr(settings, KEY_SETTING, ""))
        if generate:
            if env_mode:
                raise CommandError(f"{KEY_SETTING} is set: make the new key yourself and pass it with "
                                   "--new-key-file, then set it in every process's environment")
            new_key = Fernet.generate_key()
        else:
            try:
                raw = sys.stdin.buffer.read() if new_key_file == "-" else Path(new_key_file).read_bytes()
            except OSError as exc:
                raise CommandError(f"cannot read the new key from {new_key_file}: {exc.strerror or exc}") from None
            new_key = raw.strip()
        try:
            result = secrets_key_rotate(new_key=new_key)
        except SecretsKeyError as exc:
            raise CommandError(str(exc)) from None
        except InvalidInput as exc:
            raise CommandError("; ".join(m for ms in exc.errors.values() for m in ms)) from None
        if result.finished_pending:
            self.stdout.write("finished an interrupted rotation first")
        self.stdout.write(f"re-encrypted {result.secrets} secret value(s) and {result.retired_values} earlier "
                          f"value(s) under the new key ({result.key_destination})")
        if env_mode:
            self.stdout.write(f"now start every process (web, workers, beat, each node agent) with {KEY_SETTING} "
                              "set to the new key; until then they cannot read the secrets")
        else:
            self.stdout.write("every process reads the new key file on its next use; database backups taken "
                              "before now need the old key")
