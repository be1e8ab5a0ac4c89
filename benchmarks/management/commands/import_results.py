"""``manage.py import_results FILE``: import a SGLang ``bench_serving`` JSONL or vLLM ``bench serve``
JSON file as runs (each keeping its own line, or the whole file when it holds one run), through
:func:`benchmarks.services.run_import`.

Prints one line per run stored (``run #8 (vllm-bench-serve): ...``; a JSON-lines file also names the
line), then one per run of the file skipped because a run already holds its result (``skipped
line 1: already imported as run #5``: the same record read as JSON, from this or another file, so
a grown SGLang output file stores only its new lines). A file that cannot be imported fails with
every problem found, one per line, each at its path (``line 3.duration: ...``), as the API's 400
body has them; a file none of whose runs is new fails naming the runs holding them. With
``--allow-duplicate`` every run is stored. ``--user USERNAME`` records the importer, held to
what the API's import requires (an active operator or admin), else a one-line error naming the user
and what is missing.

Every refusal exits with status 2 (:func:`controlplane.commands.refused`, as argparse's refusal of a
bad option does): a ``--user`` that may not import, a file that is missing or cannot be read as
UTF-8 text (one line naming the file and why), a file with no new run (one line), and a file whose
contents are refused (the list above). Nothing is stored on a refusal.
"""
from __future__ import annotations

from pathlib import Path

from django.core.management.base import CommandError

from controlplane.commands import REFUSED_STATUS, CeilingCommand, refused
from benchmarks.services import AlreadyImported, run_import, run_metrics
from controlplane.errors import CeilingError, Conflict, InvalidInput
from deployments.management.command_user import command_user

# How this command's refusal of a file with no new run says to import it anyway: by its option.
_CLI_FLAG_HINT = "pass --allow-duplicate to import it again"


def invalid_file_message(name: str, exc: InvalidInput) -> str:
    """The refusal of an invalid file: its name, then one indented line per message with its path
    (``  line 3.duration: expected a number, got 'x'``), a message about the whole file (``the
    file is empty``, ``… and 12 more problems``) without one."""
    lines = [f"  {m}" if path in ("file", "detail") else f"  {path}: {m}"
             for path, messages in exc.errors.items() for m in messages]
    return "\n".join([f"{name} cannot be imported:", *lines])


class Command(CeilingCommand):
    help = "Import another harness's result file (SGLang bench_serving JSONL, vLLM bench serve JSON) as runs."

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--user", default=None, metavar="USERNAME",
                            help="record this user as the importer: an active user with the operator or admin role, "
                                 "as the API's import requires (default: none)")
        parser.add_argument("--allow-duplicate", action="store_true",
                            help="store every run of the file, also those imported before (by default they are "
                                 "skipped, and a file with no new run is refused)")

    def handle(self, *args, **o):
        user = command_user(o["user"], role="operator", what="runs by import")
        path = Path(o["file"])
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise refused(f"cannot read {path}: {exc}") from None
        try:
            runs = run_import(text=text, filename=path.name, user=user, allow_duplicate=o["allow_duplicate"])
        except InvalidInput as exc:
            raise CommandError(invalid_file_message(path.name, exc), returncode=REFUSED_STATUS) from None
        except AlreadyImported as exc:
            raise refused(f"{path.name}: {exc.said(_CLI_FLAG_HINT)}") from None
        except Conflict as exc:
            raise refused(f"{path.name}: {exc}") from None
        except CeilingError as exc:
            raise refused(f"{path.name}: {exc}") from None
        for run in runs:
            m = run_metrics(run=run)
            tok = m["output_throughput_tok_s"]
            where = f", line {run.source_line}" if run.source_line is not None else ""
            self.stdout.write(f"run #{run.pk} ({run.import_format}{where}): {run.label}, "
                              f"{m['successes']} requests ok, "
                              + (f"{tok:.1f} output tok/s" if tok is not None else "no output tok/s")
                              + (f", flags {','.join(run.flags)}" if run.flags else ""))
        for skipped in runs.skipped:
            self.stdout.write(f"skipped {skipped.said}")
