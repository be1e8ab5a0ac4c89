"""``manage.py make_tiny_gguf [--path P] [--force] [--seed N] [--n-vocab N] ...``: write the tiny
random-weight GGUF model the ``local-llamacpp`` example recipe serves.

Thin over :func:`deployments.engines.tiny_gguf.tiny_gguf_write`: idempotent (an existing file
generated with the same parameters is kept unless ``--force``), atomic, and it needs no database.
Prints one line: whether the file was written or kept, its path, its size and the parameters.
``make demo`` and ``make test`` run it with the defaults, which give
``settings.VAR_DIR / "models" / "tiny-random.gguf"``.
"""
from __future__ import annotations

import time
from pathlib import Path

from django.core.management.base import CommandError, CommandParser

from controlplane.commands import CeilingCommand
from deployments.engines.tiny_gguf import TinyGgufParams, tiny_gguf_default_path, tiny_gguf_params, tiny_gguf_write


class Command(CeilingCommand):
    help = "Generate a small random-weight llama GGUF model for the llama.cpp engine (idempotent)."
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        defaults = TinyGgufParams()
        parser.add_argument("--path", type=Path, default=None,
                            help="output file (default: VAR_DIR/models/tiny-random.gguf)")
        parser.add_argument("--force", action="store_true", help="rewrite the file even when it is up to date")
        parser.add_argument("--seed", type=int, default=defaults.seed, help="weight RNG seed")
        parser.add_argument("--n-vocab", type=int, default=defaults.n_vocab, help="vocabulary size in tokens")
        parser.add_argument("--n-embd", type=int, default=defaults.n_embd, help="hidden size")
        parser.add_argument("--n-layer", type=int, default=defaults.n_layer, help="transformer blocks")
        parser.add_argument("--n-head", type=int, default=defaults.n_head, help="attention query heads")
        parser.add_argument("--n-head-kv", type=int, default=defaults.n_head_kv, help="attention key/value heads")
        parser.add_argument("--n-ff", type=int, default=defaults.n_ff, help="feed-forward size")
        parser.add_argument("--n-ctx", type=int, default=defaults.n_ctx, help="trained context length in tokens")

    def handle(self, *args, **options) -> None:
        path: Path = (options["path"] or tiny_gguf_default_path()).absolute()
        params = TinyGgufParams(seed=options["seed"], n_vocab=options["n_vocab"], n_embd=options["n_embd"],
                                n_layer=options["n_layer"], n_head=options["n_head"],
                                n_head_kv=options["n_head_kv"], n_ff=options["n_ff"], n_ctx=options["n_ctx"])
        up_to_date = not options["force"] and tiny_gguf_params(path) == params
        started = time.monotonic()
        try:
            tiny_gguf_write(path, seed=params.seed, n_vocab=params.n_vocab, n_embd=params.n_embd,
                            n_layer=params.n_layer, n_head=params.n_head, n_head_kv=params.n_head_kv,
                            n_ff=params.n_ff, n_ctx=params.n_ctx, force=options["force"])
        except (ValueError, OSError) as exc:
            raise CommandError(f"cannot write {path}: {exc}")
        elapsed = time.monotonic() - started
        action = "kept" if up_to_date else f"wrote in {elapsed:.2f} s"
        size = path.stat().st_size
        self.stdout.write(
            f"{action}: {path} ({size} bytes, {size / 1e6:.2f} MB; {params.n_params} weights; "
            f"seed={params.seed} n_vocab={params.n_vocab} n_embd={params.n_embd} n_layer={params.n_layer} "
            f"n_head={params.n_head} n_head_kv={params.n_head_kv} n_ff={params.n_ff} n_ctx={params.n_ctx})"
        )
