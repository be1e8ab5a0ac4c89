"""``manage.py kernel_job <package> (--node NAME | --external) [--cc 9.0] [--params JSON]
[--shapes a,b] [--batches 1,8] [--wait SECONDS] [--user USERNAME]``: create a kernel job (queued on the node's agent,
or waiting for builds and results made elsewhere) and optionally wait for it to end.

Every refusal of the command's input (``--params`` that is not JSON, a package, node or user that
does not fit, a ``--wait`` that is no finite number of seconds >= 0, a job the service refuses) is
one line and exit status 2, the status of a bad option, and names every problem at once: a bad
``--user``, ``--wait`` or ``--params`` comes first in the line, as when given alone
(``the job was not created: --user 'ghost': no such user; --params is not JSON: ...; package:
...``), and the rest is judged without it. A job that cannot be created lists every problem at its path, separated by ``; ``
(``params.impl: is given 2 times (["split_k"], ["baseline"]): give it once; shapes: 'zzz' is not
a shape of ...``): a key ``--params`` gives more than once is named beside the other problems and
neither of its values is taken, and so is a shape or batch listed more than once (``batches: batch
1 is given twice: give each once``, the API's message), an empty item of ``--batches`` or ``--shapes``
(``batches: item 2 is empty: give batches as 1,8,64``) and a batch that is no integer. A number in ``--params`` that is not finite
(``1e400``, ``NaN``, ``Infinity``) is refused with the API's message at its path (``params.BLOCK.0:
1e400 is not a finite number``). An unknown package or node is named at its path beside every other
problem, as the API names them (``package: no registered kernel package named 'nope' (run
kernel_register); node: no node named 'ghost'``); without the package, a ``--cc`` is still judged
alone.

``--user USERNAME`` records the job's creator: an active user with the operator or admin role, as
the API requires, else an error naming the user and what is missing; without it the job has none
and its pages say "command line".

``--wait SECONDS`` prints the job's progress until it ends or the seconds run out: a job that ended
done exits 0, one that failed or was cancelled exits 1 with its status and reason, and one still
going exits 3 on one line (:func:`still_going_text`): it is left running, not cancelled."""
from __future__ import annotations

import re
import time

from django.core.management.base import CommandError

from controlplane.commands import CeilingCommand, refused
from controlplane.drf_defaults import empty_list_item, json_loads, nonfinite_number_errors, repeated_key_errors
from controlplane.errors import InvalidInput
from controlplane.jsonsafe import js_number, json_spelled
from controlplane.numbers import number_shown, whole_number
from deployments.management.command_user import command_user
from deployments.models import Node
from kernels.choices import JOB_TERMINAL, KernelJobStatus
from kernels.models import KernelPackage
from kernels.services import cc_problem, job_progress_total, kernel_job_check, kernel_job_create, package_manifest


#: The exit status of ``--wait`` that ran out while the job was still going (queued, building or
#: benchmarking): not success (0), no failure of the job (1), no refusal (2); ``manage.py sweep
#: --wait`` uses the same status for a sweep still going after its ``--timeout``.
STILL_GOING_STATUS = 3


def still_going_text(*, job, wait_s: float) -> str:
    """The one line of a ``--wait`` that stopped following a job after ``wait_s`` seconds, e.g.
    ``kernel job #4 is still building after --wait 900 s and was not cancelled: follow it at
    /kernels/jobs/4/ or GET /api/kernel-jobs/4/; cancel it with POST /api/kernel-jobs/4/cancel/``."""
    return (f"kernel job #{job.pk} is still {job.status} after --wait {js_number(wait_s)} s and was not cancelled: "
            f"follow it at /kernels/jobs/{job.pk}/ or GET /api/kernel-jobs/{job.pk}/; cancel it with "
            f"POST /api/kernel-jobs/{job.pk}/cancel/")


def not_created(errors: dict[str, list[str]], options: list[str] | None = None) -> CommandError:
    """The ``CommandError`` of a job not created: each refusal of an option judged alone
    (``options``: ``--user 'x': no such user``, ``--wait must be ...``, ``--params is not JSON:
    ...``) and then every message of ``errors`` (path → messages) at its path, on one line,
    separated by ``; ``; exit status 2."""
    return refused("the job was not created: " + "; ".join([*(options or []), *(
        f"{path}: {message}" for path, messages in errors.items() for message in messages)]))


def repeated_values(**lists: list | None) -> dict[str, list[str]]:
    """``{"shapes" | "batches": [message]}``, one message per value given more than once in
    ``shapes`` or ``batches`` (as the API words it: ``batch 1 is given twice: give each once``)."""
    out: dict[str, list[str]] = {}
    for name, items in lists.items():
        counts: dict = {}
        for item in items or []:
            counts[item] = counts.get(item, 0) + 1
        what = {"shapes": "shape", "batches": "batch"}[name]
        messages = [f"{what} {json_spelled(v)} is given {'twice' if n == 2 else f'{n} times'}: give each once"
                    for v, n in counts.items() if n > 1]
        if messages:
            out[name] = messages
    return out


def _under(path: str, found: dict[str, list[str]]) -> bool:
    """Whether ``found`` names ``path`` or a path inside it (``params.BLOCK.0`` is inside ``params.BLOCK``)."""
    return any(p == path or p.startswith(f"{path}.") for p in found)


# An integer as typed: ASCII digits with an optional sign (``int()`` also takes ``1_000`` and ``١``).
_INTEGER_RE = re.compile(r"[+-]?[0-9]+")


def list_items(text: str, field: str, example: str, errors: dict[str, list[str]]) -> list[str]:
    """The items of a comma-separated option (``--batches 1,8``), stripped. An empty item (``1,,8``,
    ``1,8,``) is refused, as the API and the job form refuse one: ``errors[field]`` gets
    :func:`controlplane.drf_defaults.empty_list_item`'s message (``item 2 is empty: give batches
    as 1,8,64``), and the item is not kept."""
    items = [x.strip() for x in text.split(",")]
    if "" in items:
        errors.setdefault(field, []).append(empty_list_item(items.index("") + 1, field, example))
    return [item for item in items if item]


class Command(CeilingCommand):
    help = "Create a kernel job of a registered package (on a node, or for results measured elsewhere)."

    def add_arguments(self, parser):
        parser.add_argument("package")
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--node", help="run on this node's agent (queue node.<name>)")
        where.add_argument("--external", action="store_true",
                           help="builds and results are made elsewhere (kernel_job_export / kernel_job_ingest)")
        parser.add_argument("--cc", help="target compute capability, e.g. 9.0 (default: the node's GPU)")
        parser.add_argument("--params", help='grid subset as JSON, e.g. {"impl": ["split_k"]}')
        parser.add_argument("--shapes", help="comma-separated shape names to benchmark")
        parser.add_argument("--batches", help="comma-separated batch sizes to benchmark")
        parser.add_argument("--wait", type=float, default=0.0, help="seconds to wait for the job to end")
        parser.add_argument("--user", default=None, metavar="USERNAME",
                            help="record this user as the job's creator: an active user with the operator or admin "
                                 "role, as the API requires (default: none, shown as 'command line')")

    def handle(self, *args, **options):
        # A bad --user, --wait or --params is named with every other problem, not alone: the
        # rest is judged without it (no creator, no parameters).
        bad_options: list[str] = []
        try:
            user = command_user(options["user"], role="operator", what="a kernel job")
        except CommandError as exc:
            user = None
            bad_options.append(str(exc))
        if not 0 <= options["wait"] < float("inf"):  # also NaN
            bad_options.append(f"--wait must be a finite number of seconds >= 0, got {js_number(options['wait'])}")
        try:
            subset = json_loads(options["params"]) if options["params"] else None
        except (ValueError, RecursionError) as exc:
            subset = None
            bad_options.append(f"--params is not JSON: {exc}")
        # Every problem of the job at once, as the API answers a body: an unknown package does not
        # hide an unknown node, a bad cc, a number that is not finite or a bad batch.
        nonfinite = nonfinite_number_errors(subset, "params")
        pkg = KernelPackage.objects.filter(name=options["package"]).first()
        node = Node.objects.filter(name=options["node"]).first() if options["node"] else None
        missing: dict[str, list[str]] = {}
        if pkg is None:
            missing["package"] = [f"no registered kernel package named {json_spelled(options['package'])} (run kernel_register)"]
        if options["node"] and node is None:
            missing["node"] = [f"no node named {json_spelled(options['node'])}"]
        if pkg is None and options["cc"] and (why := cc_problem(options["cc"])):
            missing["cc"] = [why]   # judged without the package too, as the API does
        # an item of --batches or --shapes that cannot be read is named with every other problem
        unread: dict[str, list[str]] = {}
        shapes = list_items(options["shapes"], "shapes", "shape1,shape2", unread) if options["shapes"] else None
        batches = None
        if options["batches"]:
            batches = []
            for item in list_items(options["batches"], "batches", "1,8,64", unread):
                number = whole_number(item.removeprefix("+"), signed=True) if _INTEGER_RE.fullmatch(item) else None
                if number is not None:
                    batches.append(number)
                elif _INTEGER_RE.fullmatch(item):
                    # more digits than any batch has (and int() refuses more than 4300): not read
                    declared = sorted({b for s in package_manifest(pkg).shapes for b in s.batches}) if pkg else None
                    unread.setdefault("batches", []).append(
                        f"{number_shown(item.removeprefix('+'))} is not a batch size"
                        + (f" of the manifest ({declared})" if declared is not None else ""))
                else:
                    unread.setdefault("batches", []).append(
                        f"{json_spelled(item)} is not an integer: give batches as 1,8,64")
        job_args = {"package": pkg, "node": node, "cc": options["cc"], "shapes": shapes, "batches": batches,
                    "dispatch": not options["external"]}
        repeated = repeated_key_errors(subset, "params")
        twice = repeated_values(shapes=shapes, batches=batches)
        if repeated or twice or unread or nonfinite or missing or bad_options:
            # The rest is judged without the keys given twice and the parameters holding a number
            # that is not finite; the grid's size is not, as it depends on the value not taken.
            skipped = {**repeated, **nonfinite}
            kept = ({k: v for k, v in subset.items() if not _under(f"params.{k}", skipped)
                     and not repeated_key_errors(v)} if isinstance(subset, dict) else subset)
            others: dict[str, list[str]] = {}
            if pkg is not None:
                others = kernel_job_check(params_subset=kept or None, **job_args)
                if options["node"] and node is None:
                    others.pop("node", None)
                    if not options["cc"]:
                        others.pop("cc", None)   # a cc is only missing given a node
            errors: dict[str, list[str]] = {}
            for part in (missing, nonfinite, repeated, unread, twice,
                         {path: messages for path, messages in others.items()
                          if path not in repeated and path not in twice and path not in missing
                          and not (skipped and path == "variants")}):
                for path, messages in part.items():
                    errors.setdefault(path, []).extend(messages)
            raise not_created(errors, bad_options)
        try:
            job = kernel_job_create(params_subset=subset, user=user, **job_args)
        except InvalidInput as exc:
            raise not_created(exc.errors) from None
        self.stdout.write(f"kernel job #{job.pk}: {pkg.name}, {job.variants_total} variants, cc {job.target_cc}, "
                          + (f"queued on node.{node.name}" if node else "waiting for external builds and results")
                          + (f"; {job.note}" if node and job.note else ""))
        deadline = time.monotonic() + options["wait"]
        last = None
        while options["wait"] and time.monotonic() < deadline:
            job.refresh_from_db()
            line = f"  {job.status} {job.phase} {job.progress_done}/{job_progress_total(job)}"
            if line != last:
                self.stdout.write(line)
                last = line
            if job.status in JOB_TERMINAL:
                break
            time.sleep(1.0)
        if options["wait"]:
            job.refresh_from_db()
            if job.status not in JOB_TERMINAL:
                raise CommandError(still_going_text(job=job, wait_s=options["wait"]), returncode=STILL_GOING_STATUS)
            line = (f"kernel job #{job.pk}: {job.status}"
                    + (f" ({job.reason})" if job.reason else "") + (f"; {job.note}" if job.note else ""))
            if job.status != KernelJobStatus.DONE:
                raise CommandError(line, returncode=1)
            self.stdout.write(line)
