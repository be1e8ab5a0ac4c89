"""``manage.py sweep <deployment-id|recipe-name> --concurrency 1,8,16 --lengths 256:256 [--requests N] [--wait]``.

Creates a sweep through :func:`benchmarks.services.sweep_create` (the same service as the API and
UI). The sweep runs on the ``control`` worker; ``--wait`` follows it and prints the results table
and the ceiling findings; ``--here`` runs it in this process instead (no worker needed; a sweep held
back by another on a deployment sharing its CPUs or GPUs waits here, pending, and then runs here).
``--duration S`` limits each point to S seconds (with ``--requests``, whichever ends first).
``--name NAME`` names the sweep, as the API's and the form's ``name`` do (judged by the API's own
field, :func:`benchmarks.forms.sweep_name_read`: at most 200 characters, no control or
text-direction characters, spaces around it trimmed; refused as ``--name (name): <the API's
message>`` beside any problem of the grid); without it, or blank, the sweep is named from its
recipe and grid, as the API names it. The line printed on creation quotes a name given.
``--user USERNAME`` records the sweep's creator (an active operator or admin, as the API requires;
:func:`deployments.management.command_user.command_user`); without it the sweep has none and its
pages say "command line".

Every grid field the API takes has an option (:data:`OPTION_OF`): ``--request-rates 2,4.5``
(``request_rates``, requests/s; open-loop points; without ``--concurrency`` the sweep has only
these), ``--slo-ttft``/``--slo-tpot``/``--slo-e2e`` (``slo.ttft_s``/``tpot_s``/``e2e_s``, seconds,
as the API takes them; the web form takes ms), ``--seed`` (``seed``) and ``--wait-ready``
(``wait_ready_s``, seconds). The values are checked by the API's own validation
(:func:`benchmarks.sweeps.grid_validate`, through ``sweep_create``); a refusal names each option
with its grid path and the API's message, one per line, and the command exits with status 2, as
it does for every other refusal of its input, each on one line (no such deployment or recipe, a
``--user`` that may not create a sweep, a sweep the service refuses). A sweep that was created and
then failed or was cancelled (``--wait``, ``--here``) exits with status 1. ``--wait`` follows the
sweep for ``--timeout`` seconds at most (a finite number > 0 written as the API writes one, read
by :func:`seconds_option`; anything else is refused by the option's parser, naming the option and
its unit and quoting what was typed, status 2; a value starting with ``-``, ``--timeout -inf``, is
the option's value, :func:`dash_values_joined`); a sweep
not yet ended by then is left running, not cancelled: the command says so on one line with the
sweep's id, its page and API paths and how to cancel it, and exits with status 3
(:data:`STILL_RUNNING_STATUS`). While it follows the sweep (``--wait``, or ``--here`` when a
control worker claimed it first) it prints a progress line at once, whenever the phase or a count
changes and every 10 s meanwhile (:func:`benchmarks.services.sweep_wait`).

The report printed at the end (:func:`benchmarks.services.sweep_report_text`) stays narrow enough
for an 80-120 column terminal: units sit in a second header line, and a cell's long text (a
cancelled point's ``63 sent of 400 planned``, ``0 (+2 aborted)``, flag names) is cut to its
leading number with a numbered reference (``63 [1]``); the notes themselves follow the table,
one per number, wrapped to :data:`benchmarks.sweeps.REPORT_WIDTH` columns.
"""
from __future__ import annotations

import argparse
import math
import re
import time

from django.core.management.base import CommandError

from controlplane.commands import CeilingCommand, refused, refused_list
from benchmarks.choices import SWEEP_TERMINAL, SweepStatus
from benchmarks.forms import grid_value, sweep_name_read
from benchmarks.selectors import sweep_load_notes, sweep_queue_note
from benchmarks.services import sweep_create, sweep_execute, sweep_report_text, sweep_wait
from benchmarks.services.sweeps import SHARED_RECHECK_S
from benchmarks.sweeps import DEFAULT_LENGTHS, DEFAULT_REQUESTS_PER_CONCURRENCY, WAIT_READY_MARGIN_S, counted, grid_validate
from controlplane.drf_defaults import empty_list_item
from controlplane.errors import CeilingError, InvalidInput
from controlplane.jsonsafe import js_number, json_spelled
from controlplane.numbers import whole_number
from deployments.choices import DEPLOYMENT_ACTIVE
from deployments.management.command_user import command_user
from deployments.models import Deployment


# The option that sets each grid field (the API's names, :data:`benchmarks.sweeps.GRID_KEYS`), so a
# refusal of ``grid.seed`` or ``grid.request_rates.1`` names the option the user typed.
OPTION_OF = {
    "concurrency": "--concurrency", "lengths": "--lengths", "request_rates": "--request-rates",
    "requests": "--requests", "requests_per_concurrency": "--requests-per-concurrency", "duration_s": "--duration",
    "warmup": "--warmup", "slo.ttft_s": "--slo-ttft", "slo.tpot_s": "--slo-tpot", "slo.e2e_s": "--slo-e2e",
    "slo": "--slo-ttft/--slo-tpot/--slo-e2e", "api": "--api", "wait_ready_s": "--wait-ready", "seed": "--seed",
}

#: The concurrency list of a sweep given neither ``--concurrency`` nor ``--request-rates``.
DEFAULT_CONCURRENCY = "1,8,16"

#: The exit status of ``--wait`` whose ``--timeout`` ran out while the sweep was still going (pending,
#: waiting for the deployment or running): not success (0), no failure of the sweep (1), no refusal (2).
STILL_RUNNING_STATUS = 3


def still_running_text(*, sweep, timeout_s: float) -> str:
    """The one line of a sweep ``--wait`` stopped following after ``timeout_s`` seconds, e.g.
    ``sweep #7 is still running after --timeout 60 s and was not cancelled: follow it at
    /benchmarks/sweeps/7/ or GET /api/sweeps/7/; cancel it with POST /api/sweeps/7/cancel/``."""
    return (f"sweep #{sweep.pk} is still {SweepStatus(sweep.status).label} after --timeout {js_number(timeout_s)} s and was "
            f"not cancelled: follow it at /benchmarks/sweeps/{sweep.pk}/ or GET /api/sweeps/{sweep.pk}/; cancel it "
            f"with POST /api/sweeps/{sweep.pk}/cancel/")


# A number as the API reads one (``deployments.api.serializers._DECIMAL_RE``): ASCII digits with an
# optional sign, point and exponent. ``float()`` alone also takes "1_000", "١", "nan" and "inf".
_DECIMAL_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def seconds_option(text: str) -> float:
    """The value of ``--timeout``: a finite number of seconds > 0, written as a decimal as the API
    reads a number (``60``, ``2.5``, ``1e3``; spaces around it taken; no ``1_000``, ``inf`` or
    ``nan``). Anything else is refused by the option's parser, which names the option before the
    reason and quotes what was typed, never the number it parsed to (``argument --timeout: must be
    a finite number of seconds > 0, got 1e400``, not ``Infinity``; ``got 1e-400``, not ``0``;
    ``... (e.g. 3600), got 'abc'`` for a text that is no number), with exit status 2."""
    typed = text.strip()
    if not _DECIMAL_RE.fullmatch(typed):
        raise argparse.ArgumentTypeError(
            f"must be a finite number of seconds > 0 (e.g. 3600), got {json_spelled(text)}")
    value = float(typed)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {typed}")
    return value


def dash_values_joined(args: list[str], value_options: set[str], known: set[str]) -> list[str]:
    """``args`` with a value that starts with ``-`` but is no option of the command joined to the
    option before it (``--timeout -inf`` -> ``--timeout=-inf``), which argparse would otherwise read
    as an unknown option and refuse as ``expected one argument``: the value is judged, and refused
    in its option's words, as it is when written ``--timeout=-inf``. A known option in its place
    (``--name --wait``) is left for argparse to refuse as before."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if (arg in value_options and i + 1 < len(args) and args[i + 1].startswith("-") and args[i + 1] != "-"
                and args[i + 1].split("=", 1)[0] not in known):
            out.append(f"{arg}={args[i + 1]}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


# The example each list option's refusal of an empty item shows.
_LIST_EXAMPLE = {"concurrency": "1,8,16", "lengths": "256:256,1024:128", "request_rates": "2,4.5"}


def _texts(text: str, field: str, empties: dict[str, list[str]]) -> list[str]:
    """The items of a comma-separated option, stripped. An empty item (``1,,2``, ``1,2,``) is
    refused, as the API and the forms refuse one (:func:`controlplane.drf_defaults.empty_list_item`):
    ``empties["grid.<field>"]`` gets ``item 2 is empty: give --concurrency as 1,8,16``, and the
    item is not kept. A blank option has no items."""
    items = [x.strip() for x in text.split(",")] if text.strip() else []
    if "" in items:
        option = OPTION_OF[field]
        empties[f"grid.{field}"] = [empty_list_item(items.index("") + 1, option, _LIST_EXAMPLE[field])]
    return [item for item in items if item]


def _items(text: str, field: str, empties: dict[str, list[str]]) -> list[int | float | str]:
    """A comma-separated option (``1,8,16``, ``2,4.5``) as the grid's list: each item as the JSON
    value it reads as (:func:`benchmarks.forms.grid_value`, as the sweep form reads its items), a
    text that is no number kept as text, for the grid's validation to name at its index beside
    every other problem (``--concurrency (grid.concurrency.1): must be an integer 1..4096, got the
    string "x"``); an empty item is refused in ``empties`` (:func:`_texts`)."""
    return [grid_value(item) for item in _texts(text, field, empties)]


def _option_for(path: str) -> str | None:
    """The option behind a grid error path (``grid.request_rates.1`` -> ``--request-rates``), or
    None for a path about the grid as a whole (``grid``: its size)."""
    parts = path.split(".")[1:]
    for n in (2, 1):
        option = OPTION_OF.get(".".join(parts[:n]))
        if option and len(parts) >= n:
            return option
    return None


# Wording of grid refusals that names the API's fields or JSON shapes, as the command line says
# it: the options typed and the ``in:out`` form of ``--lengths`` (applied in order, before
# :data:`_GRID_FIELD_RE`).
_CLI_PHRASES = (
    ("give requests or requests_per_concurrency", "give --requests or --requests-per-concurrency"),
    ("a fixed number of requests or a duration_s", "--requests or --duration"),
    ("or give requests", "or give --requests"),
    ("give at least one [input_len, output_len] pair, e.g. [[256, 256]]", "give at least one in:out pair, e.g. 256:256"),
)
# A grid field named in a refusal's text (``lower the rate or duration_s``), for its option.
_GRID_FIELD_RE = re.compile(r"\b(request_rates|requests_per_concurrency|duration_s|wait_ready_s)\b")


def cli_wording(message: str) -> str:
    """A grid refusal's text naming the command's options instead of the API's fields:
    ``lower the rate or duration_s, or give requests`` -> ``lower the rate or --duration, or give
    --requests``."""
    for api_words, cli_words in _CLI_PHRASES:
        message = message.replace(api_words, cli_words)
    return _GRID_FIELD_RE.sub(lambda m: OPTION_OF[m.group(1)], message)


def grid_error_lines(exc: InvalidInput) -> list[str]:
    """A refused grid's messages for the terminal, one line each, led by its option and grid path
    (``  --seed (grid.seed): must be an integer 0..2^31-1, got -1``); a message about the whole
    grid (its size) by its path alone. A message that names another grid field names its option
    (:func:`cli_wording`). The command prints them under ``the sweep grid is refused:``."""
    lines = []
    for path, messages in exc.errors.items():
        option = _option_for(path)
        where = f"{option} ({path})" if option else path
        lines.extend(f"  {where}: {cli_wording(m)}" for m in messages)
    return lines


def no_deployment_text(target: str) -> str:
    """Why ``target`` (a recipe name, or an id) names no deployment to sweep: a recipe whose latest
    deployment ended says so as the API's 409 does (``recipe 'local-sim-single': its latest
    deployment #4 is failed (first line of its reason); deploy it again and sweep the new
    deployment``); a recipe never deployed says that; an earlier name of a recipe (a deployment's
    name as deployed, before a rename) names the recipe's current name to give instead
    (:func:`deployments.selectors.recipe_renamed_text`: ``recipe 't1b' was renamed 't1b-renamed'
    (at v3); use that name``), never sweeping by it; anything else is not a deployment or recipe
    Ceiling knows."""
    from deployments.models import Recipe
    from deployments.selectors import recipe_renamed_text

    if not (target.isascii() and target.isdigit()):
        latest = Deployment.objects.filter(recipe__name=target).order_by("-created_at", "-id").first()
        if latest is not None:
            why = (latest.reason or "").split("\n", 1)[0].strip()
            why = why if len(why) <= 200 else why[:199] + "…"
            return (f"recipe {json_spelled(target)}: its latest deployment #{latest.pk} is {latest.status}"
                    + (f" ({why})" if why else "") + "; deploy it again and sweep the new deployment")
        if Recipe.objects.filter(name=target).exists():
            return f"recipe {json_spelled(target)} has no deployment; deploy it first to sweep it"
        renamed = recipe_renamed_text(target)
        if renamed:
            return renamed
    return f"no deployment {json_spelled(target)} (give an id, or the name of a recipe that is deployed)"


class Command(CeilingCommand):
    help = ("Sweep a deployment over concurrency x lengths; with --wait print the results and findings. "
            f"Without --concurrency or --request-rates the points are c={DEFAULT_CONCURRENCY}, and without "
            f"--requests, --requests-per-concurrency or --duration each sends {DEFAULT_REQUESTS_PER_CONCURRENCY} x c "
            "requests; the line printed on creation names the defaults taken.")

    def create_parser(self, prog_name, subcommand, **kwargs):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parse_known_args = parser.parse_known_args
        known = set(parser._option_string_actions)
        value_options = {name for action in parser._actions if action.nargs is None and action.option_strings
                         and not isinstance(action, (argparse._StoreTrueAction, argparse._StoreConstAction))
                         for name in action.option_strings}

        def parse_known_args_joined(args=None, namespace=None):
            if args is not None:
                args = dash_values_joined([str(a) for a in args], value_options, known)
            return parse_known_args(args, namespace)

        parser.parse_known_args = parse_known_args_joined
        return parser

    def add_arguments(self, parser):
        parser.add_argument("target", help="deployment id, or a recipe's current name (its active deployment); "
                                              "an earlier name of a renamed recipe is refused, naming the current one")
        parser.add_argument("--concurrency", default=None,
                            help=f"closed-loop points, comma-separated, e.g. 1,8,16 (default {DEFAULT_CONCURRENCY}; "
                                 "none when --request-rates is given)")
        parser.add_argument("--lengths", default=DEFAULT_LENGTHS,
                            help=f"input:output token pairs, comma-separated (default {DEFAULT_LENGTHS})")
        parser.add_argument("--requests", default=None,
                            help=f"requests per point (default {DEFAULT_REQUESTS_PER_CONCURRENCY} x c, i.e. "
                                 f"--requests-per-concurrency {DEFAULT_REQUESTS_PER_CONCURRENCY}, unless --duration "
                                 "is given)")
        parser.add_argument("--requests-per-concurrency", default=None,
                            help="requests = k x c rounded up (default "
                                 f"{DEFAULT_REQUESTS_PER_CONCURRENCY} without --requests or --duration)")
        parser.add_argument("--duration", default=None,
                            help="seconds per point (with --requests: whichever ends first)")
        parser.add_argument("--warmup", default=None, help="warmup requests per point (default 0)")
        parser.add_argument("--api", default=None, help="sglang-generate, openai-completions or openai-chat")
        parser.add_argument("--request-rates", default=None, metavar="RATES",
                            help="open-loop points, requests/s, comma-separated, e.g. 2,4.5 (grid request_rates; "
                                 "needs --requests or --duration)")
        parser.add_argument("--slo-ttft", default=None, metavar="S",
                            help="TTFT SLO for goodput, seconds, at most 600 (grid slo.ttft_s)")
        parser.add_argument("--slo-tpot", default=None, metavar="S",
                            help="TPOT SLO for goodput, seconds, at most 600 (grid slo.tpot_s)")
        parser.add_argument("--slo-e2e", default=None, metavar="S",
                            help="E2E SLO for goodput, seconds, at most 3600 (grid slo.e2e_s)")
        parser.add_argument("--seed", default=None, metavar="N",
                            help="dataset seed, 0..2^31-1 (grid seed; default 0)")
        parser.add_argument("--wait-ready", default=None, metavar="S",
                            help="seconds to wait for the deployment to be ready, 0..86400 (grid wait_ready_s; "
                                 "default its startup timeout + 60)")
        parser.add_argument("--wait", action="store_true", help="follow the sweep and print its results")
        parser.add_argument("--here", action="store_true", help="run the sweep in this process")
        parser.add_argument("--timeout", type=seconds_option, default=3600.0, metavar="S",
                            help="seconds --wait follows the sweep, a number > 0 (default 3600); a sweep still "
                                 "going then is left running, not cancelled, and the command exits with status 3")
        parser.add_argument("--name", default=None,
                            help="the sweep's name, at most 200 characters, as the API's name (default: made up "
                                 "from the recipe and the grid)")
        parser.add_argument("--user", default=None, metavar="USERNAME",
                            help="record this user as the sweep's creator: an active user with the operator or "
                                 "admin role, as the API requires (default: none, shown as 'command line')")

    def _run_here(self, sweep, *, timeout_s: float) -> None:
        """Run ``sweep`` in this process. A sweep held back because another sweep runs on a
        deployment sharing its CPUs or GPUs stays pending (its queue note is printed once, and again
        when it changes) and is looked at again every :data:`SHARED_RECHECK_S` seconds, here, with
        no task sent to a worker, until it runs or ends (a cancel while held ends it). Should a
        control worker have claimed it first, it is followed there for ``timeout_s`` seconds, as
        ``--wait`` does."""
        note = None
        while sweep_execute(sweep_id=sweep.pk, requeue=False) == SweepStatus.PENDING:
            sweep.refresh_from_db()
            text = sweep_queue_note(sweep=sweep)
            if text and text != note:
                self.stdout.write(f"sweep #{sweep.pk} pending: {text}")
                note = text
            time.sleep(SHARED_RECHECK_S)
        sweep.refresh_from_db()
        if sweep.status not in SWEEP_TERMINAL:
            # A control worker claimed the sweep's own task first (the claim is one conditional
            # UPDATE, so it runs once): follow it there.
            sweep_wait(sweep=sweep, timeout_s=timeout_s, progress=self.stdout.write)
            if sweep.status not in SWEEP_TERMINAL:
                raise CommandError(still_running_text(sweep=sweep, timeout_s=timeout_s),
                                   returncode=STILL_RUNNING_STATUS)

    def handle(self, *args, **o):
        user = command_user(o["user"], role="operator", what="a sweep")
        target = o["target"]
        if target.isascii() and target.isdigit():
            # an id of more digits than any row's is no deployment's (int() refuses more than 4300)
            deployment_id = whole_number(target)
            deployment = (Deployment.objects.select_related("recipe").filter(pk=deployment_id).first()
                          if deployment_id is not None else None)
            named = Deployment.objects.filter(recipe__name=target, status__in=DEPLOYMENT_ACTIVE)
            by_name = (named.exclude(pk=deployment_id) if deployment_id is not None else named).first()
            if by_name is not None:
                # A recipe named with digits alone, saved before such names were refused.
                raise refused(f"{json_spelled(target)} is deployment #{target}"
                              + ("" if deployment else " (there is none)")
                              + f" and also the name of recipe {json_spelled(target)}, deployed as #{by_name.pk}; "
                              f"give that id ({by_name.pk}) to sweep it, and rename the recipe to end the ambiguity")
        else:
            deployment = (Deployment.objects.select_related("recipe")
                          .filter(recipe__name=target, status__in=DEPLOYMENT_ACTIVE).first())
        if deployment is None:
            raise refused(no_deployment_text(target))
        # An item that is no number goes to the grid as its text: the grid's validation names it at
        # its index with every other problem, and refuses the sweep.
        empties: dict[str, list[str]] = {}
        rates = _items(o["request_rates"], "request_rates", empties) if o["request_rates"] is not None else []
        concurrency = o["concurrency"] if o["concurrency"] is not None else ("" if rates else DEFAULT_CONCURRENCY)
        grid: dict = {"concurrency": _items(concurrency, "concurrency", empties),
                      "lengths": _texts(o["lengths"], "lengths", empties)}
        if rates:
            grid["request_rates"] = rates
        # Every number option is taken as text and read as the JSON value it spells, as the sweep
        # form reads its fields (benchmarks.forms.grid_value): the grid's validation judges it, so
        # "2.5" for --requests gets the API's "must be an integer 1..100000, got 2.5", not
        # argparse's "invalid int value".
        typed = {option: grid_value(str(o[option]).strip()) for option in (
            "warmup", "slo_ttft", "slo_tpot", "slo_e2e", "seed", "wait_ready", "requests",
            "requests_per_concurrency", "duration") if o[option] is not None}
        slo = {key: typed[f"slo_{name}"] for key, name in (("ttft_s", "ttft"), ("tpot_s", "tpot"), ("e2e_s", "e2e"))
               if f"slo_{name}" in typed}
        if slo:
            grid["slo"] = slo
        for option, key in (("warmup", "warmup"), ("seed", "seed"), ("wait_ready", "wait_ready_s"),
                            ("requests", "requests"), ("requests_per_concurrency", "requests_per_concurrency"),
                            ("duration", "duration_s")):
            if option in typed:
                grid[key] = typed[option]
        if o["api"]:
            grid["api"] = o["api"]
        name, name_refusals = sweep_name_read(o["name"]) if o["name"] is not None else ("", [])
        if empties or name_refusals:
            # refused, with every other problem of the grid as the API would name it
            spec = deployment.spec_snapshot or {}
            try:
                grid_validate(grid, engine=deployment.recipe.engine, spec=spec, reported=deployment.engine_limits,
                              default_wait_ready_s=int(spec.get("startup_timeout_s") or 1800) + WAIT_READY_MARGIN_S)
                others: dict[str, list[str]] = {}
            except InvalidInput as exc:
                others = exc.errors
            errors = {path: [*messages] for path, messages in empties.items()}
            for path, messages in others.items():
                errors.setdefault(path, []).extend(messages)
            lines = grid_error_lines(InvalidInput(errors)) if errors else []
            if name_refusals:
                raise refused_list("the sweep is refused:", [f"  --name (name): {m}" for m in name_refusals] + lines)
            raise refused_list("the sweep grid is refused:", lines)
        try:
            sweep = sweep_create(deployment=deployment, user=user, grid=grid, name=name)
        except InvalidInput as exc:
            raise refused_list("the sweep grid is refused:", grid_error_lines(exc)) from None
        except CeilingError as exc:
            raise refused(str(exc)) from None
        requests = (counted(sweep.requests_total, "request") if not sweep.has_open_ended_points
                    else f"as many requests as fit in {js_number(sweep.grid['duration_s'])} s per point"
                    + (f" ({sweep.requests_total} for the points with a request count)" if sweep.requests_total
                       else ""))
        defaults = ([f"--concurrency {DEFAULT_CONCURRENCY}"] if o["concurrency"] is None and not rates else []) + (
            [f"--requests-per-concurrency {DEFAULT_REQUESTS_PER_CONCURRENCY} ({DEFAULT_REQUESTS_PER_CONCURRENCY} x c "
             "requests per point)"]
            if o["requests"] is None and o["requests_per_concurrency"] is None and o["duration"] is None else [])
        points = counted(sweep.points_total, "point")
        named = f" {json_spelled(sweep.name)}" if name else ""
        self.stdout.write(f"sweep #{sweep.pk}{named} created: {points}, {requests}"
                          + (f"; defaults taken: {', '.join(defaults)}" if defaults else ""))
        for note in sweep_load_notes(sweep=sweep):  # loads the engine queues: TTFT includes the wait
            self.stdout.write(f"note: {note}")
        if o["here"]:
            self._run_here(sweep, timeout_s=o["timeout"])
        elif o["wait"]:
            sweep_wait(sweep=sweep, timeout_s=o["timeout"], progress=self.stdout.write)
            if sweep.status not in SWEEP_TERMINAL:
                raise CommandError(still_running_text(sweep=sweep, timeout_s=o["timeout"]),
                                   returncode=STILL_RUNNING_STATUS)
        else:
            return
        self.stdout.write(sweep_report_text(sweep=sweep))
        if sweep.status != SweepStatus.DONE:
            raise CommandError(f"sweep #{sweep.pk} {sweep.status}: {sweep.reason}")
