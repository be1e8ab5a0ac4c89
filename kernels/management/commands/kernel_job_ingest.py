"""``manage.py kernel_job_ingest <job_id> [results.json] [--builds builds.json]``: store builds and
results measured elsewhere through the same services a job run here uses.

``manage.py kernel_job_ingest --new <package> --variants variants.json results.json [--builds ...]``
creates the job from the runner's ``variants.json`` first (exactly those variants, ids mapped by
params), e.g. for ``kernels/packages/sparse_mla_decode/results/`` measured on an H200. A job made
that way takes more results later with ``kernel_job_ingest <job_id> results.json --variants
variants.json`` when they carry no ``variants_sha256`` (the file says whose ids they use).

A ``results.json`` carrying ``variants_sha256`` (written by the runner's ``bench``) is refused
unless it matches the variants it is stored against: the job's own (those ``kernel_job_export``
wrote) or, with ``--new``, the ``--variants`` file. Older results without it are paired by
``variant_id``, and a row naming a variant the job (or the ``--variants`` file) lacks is refused. ``--new`` refuses a results file
already stored as a job of the package (it names that job).

Each file is read as the API reads a body: one that gives a key twice in an object or holds a
number that is not finite (``NaN``, ``Infinity``, ``1e400``) is refused on one line naming the
file and each problem at its path, exit status 2, and nothing is stored; a results row's
``max_abs_err`` and ``max_rel_err`` alone may be ``NaN`` or ``Infinity``, as the runner writes them
for a wrong output.

``--user USERNAME`` (with ``--new``) records the new job's creator: an active user with the operator
or admin role, as the API requires to create a kernel job, else a one-line error naming the user and
what is missing; without it the job has none and its pages say "command line". Without ``--new``
nothing is created, so ``--user`` is refused there rather than ignored.

Every refusal of the command's input exits with status 2 (:func:`controlplane.commands.refused`, as
argparse's refusal of a bad option does), on one line unless a refused file has several problems
(each on its own line on stderr, then the count): a ``--user`` that may not create the job or that
nothing would record, a missing job id, job or package, a file that cannot be read as JSON, results
or builds the job refuses."""
from __future__ import annotations

import re
from pathlib import Path

from controlplane.commands import CeilingCommand, refused
from controlplane.drf_defaults import BOM, json_loads, nonfinite_number_errors, repeated_key_errors
from controlplane.errors import CeilingError, InvalidInput
from controlplane.jsonsafe import json_spelled
from controlplane.numbers import number_shown, whole_number
from deployments.management.command_user import command_user
from kernels.models import KernelJob, KernelPackage
from kernels.selectors import job_result_lines
from kernels.services import kernel_job_from_measurement, kernel_job_ingest

#: Where a results file may hold a number that is not finite: a row's two errors (see ``_read``).
RUNNER_NONFINITE_RE = re.compile(r"results\.[0-9]+\.(max_abs_err|max_rel_err)")


class Command(CeilingCommand):
    help = "Store a kernel job's builds.json and/or results.json measured on another machine."

    def add_arguments(self, parser):
        parser.add_argument("job_id", nargs="?", help="the job to store into (or use --new)")
        parser.add_argument("results", nargs="?", help="the runner's results.json")
        parser.add_argument("--builds", help="the runner's builds.json")
        parser.add_argument("--new", metavar="PACKAGE", help="create a job of PACKAGE from --variants first")
        parser.add_argument("--variants", help="with --new: the runner's variants.json the results were measured "
                                               "from; with a job id: the variants file that job was created from "
                                               "(its ids are those of results without a variants_sha256)")
        parser.add_argument("--user", default=None, metavar="USERNAME",
                            help="with --new: record this user as the job's creator (an active operator or admin, "
                                 "as the API requires; default: none, shown as 'command line')")

    def _read(self, path: str, *, errors_may_be_infinite: bool = False):
        """The JSON file ``path`` read as the API reads a body (:func:`controlplane.drf_defaults.json_loads`).
        A file that cannot be read or is not JSON stops the command with the reason. One that gives
        a key twice in an object, or holds a number that is not finite (``NaN``, ``Infinity``,
        ``1e400``), is refused on one line naming the file and every such problem at its path
        (``results.json: nothing was stored: results.0.median_us: NaN is not a finite number``),
        exit status 2 (:func:`controlplane.commands.refused`), before anything is
        stored: either would be a value the file does not say (the last of two, or no number).
        With ``errors_may_be_infinite`` (a results file) a row's ``max_abs_err`` and
        ``max_rel_err`` may be ``NaN`` or ``Infinity``: the runner's bench writes them so for an
        output with NaN or Inf values or of the wrong shape, or a reference of zeros, and the store
        judges them (:func:`kernels.services.results.kernel_results_store`)."""
        try:
            data = json_loads(Path(path).read_text(encoding="utf-8").removeprefix(BOM))
        except (OSError, ValueError, RecursionError) as exc:
            raise refused(f"{path}: {exc}") from None
        problems = repeated_key_errors(data)
        for where, messages in nonfinite_number_errors(data).items():
            if not (errors_may_be_infinite and RUNNER_NONFINITE_RE.fullmatch(where)):
                problems.setdefault(where, []).extend(messages)
        if problems:
            raise refused(f"{path}: nothing was stored: " + "; ".join(
                f"{where}: {message}" for where, messages in problems.items() for message in messages))
        return data

    def handle(self, *args, **options):
        if options["user"] is not None and not options["new"]:
            raise refused("--user records the creator of the job --new creates; without --new nothing is "
                          "created: leave --user out")
        user = command_user(options["user"], role="operator", what="a kernel job")
        if options["new"]:
            # With --new the one positional argument is the results file.
            if options["results"]:
                raise refused(f"--new creates a job: give only the results file, not a job id "
                              f"({json_spelled(options['job_id'])}); to store into an existing job, leave out --new")
            results_path = options["job_id"]
            if not results_path or not options["variants"]:
                raise refused("--new PACKAGE needs --variants variants.json and results.json")
            package = KernelPackage.objects.filter(name=options["new"]).first()
            if package is None:
                raise refused(f"no kernel package {json_spelled(options['new'])} (run manage.py kernel_register)")
            variants = self._read(options["variants"])
            results = self._read(results_path, errors_may_be_infinite=True)
            builds = self._read(options["builds"]) if options["builds"] else None
            job = self._stored(lambda: kernel_job_from_measurement(
                package=package, variants=variants, results=results, builds=builds, user=user))
            self._report(job, {"variants": job.variants.count()})
            return
        if not options["job_id"] or not re.fullmatch(r"[0-9]+", str(options["job_id"])):
            raise refused("give a job id (or --new PACKAGE --variants variants.json results.json)")
        # an id of more digits than any row's is no job's (int() refuses more than 4300)
        job_id = whole_number(str(options["job_id"]))
        job = KernelJob.objects.filter(pk=job_id).first() if job_id is not None else None
        if job is None:
            shown = options["job_id"] if job_id is not None else number_shown(str(options["job_id"]))
            raise refused(f"no kernel job with id {shown}")
        if not options["results"] and not options["builds"]:
            raise refused("give results.json and/or --builds builds.json")
        results = self._read(options["results"], errors_may_be_infinite=True) if options["results"] else None
        builds = self._read(options["builds"]) if options["builds"] else None
        source = self._read(options["variants"]) if options["variants"] else None
        out = self._stored(lambda: kernel_job_ingest(job=job, results=results, builds=builds, source_variants=source))
        self._report(job, out)

    def _stored(self, store):
        """Run ``store()``; a refused payload stops (exit status 2) with the reason itself when
        there is one (e.g. results measured from another variants list: both fingerprints), else
        prints every reason with its path, once each, and stops with how many there are."""
        try:
            return store()
        except InvalidInput as exc:
            reasons = [f"{path}: {m}" for path, msgs in exc.errors.items() for m in msgs]
            if len(reasons) == 1:
                raise refused(f"nothing was stored: {reasons[0]}") from None
            for line in reasons:
                self.stderr.write(line)
            raise refused(f"nothing was stored: {len(reasons)} problems, listed above") from None
        except CeilingError as exc:
            raise refused(str(exc)) from None

    def _report(self, job, out):
        """Print what this ingest stored next to what the job holds now, never mixed in one
        count: ``out`` is :func:`kernel_job_ingest`'s answer (``builds``/``results``: the rows
        of this file under ``stored``) or, with ``--new``, ``{"variants": <created>}``; the
        totals come from the job's row."""
        job.refresh_from_db()
        self.stdout.write(f"kernel job #{job.pk}: {job.status}")
        if "variants" in out:
            self.stdout.write(f"  created with {out['variants']} variants (those of the --variants file)")
        if "builds" in out:
            self.stdout.write(f"  builds: stored {_rows(out['builds']['stored'])} from this file; the job now holds "
                              f"{job.builds_ok} built ({job.builds_discarded} of them discarded), "
                              f"{job.builds_failed} failed")
        if "results" in out:
            self.stdout.write(f"  results: stored {_rows(out['results']['stored'])} from this file; the job now "
                              f"holds {job.benchmarks_total} measurements: {job.benchmarks_correct} correct, "
                              f"{job.benchmarks_wrong} wrong")
        elif "variants" in out:
            self.stdout.write(f"  the job holds {job.builds_ok} built ({job.builds_discarded} of them discarded), "
                              f"{job.builds_failed} failed; {job.benchmarks_total} measurements: "
                              f"{job.benchmarks_correct} correct, {job.benchmarks_wrong} wrong")
        for line in job_result_lines(job):
            self.stdout.write(line)


def _rows(n: int) -> str:
    return f"{n} row" + ("" if n == 1 else "s")
