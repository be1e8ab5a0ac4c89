"""``manage.py sweep <deployment-id|recipe-name> --concurrency 1,8,16 --lengths 256:256 [--requests N] [--wait]``.

Creates a sweep through :func:`benchmarks.services.sweep_create` (the same service as the API and
UI). The sweep runs on the ``control`` worker; ``--wait`` follows it and prints the results table
and the ceiling findings; ``--here`` runs it in this process instead (no worker needed).
``--duration S`` limits each point to S seconds (with ``--requests``, whichever ends first).
"""
from __future__ import annotations

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError

from benchmarks.choices import SweepStatus
from benchmarks.services import sweep_create, sweep_execute, sweep_report_text, sweep_wait
from controlplane.errors import CeilingError
from deployments.choices import DEPLOYMENT_ACTIVE
from deployments.models import Deployment


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CommandError(f"not a comma-separated list of integers: {text!r}") from None


class Command(BaseCommand):
    help = "Sweep a deployment over concurrency x lengths; with --wait print the results and findings."

    def add_arguments(self, parser):
        parser.add_argument("target", help="deployment id, or a recipe name (its active deployment)")
        parser.add_argument("--concurrency", default="1,8,16", help="comma-separated, e.g. 1,8,16")
        parser.add_argument("--lengths", default="256:256", help="input:output token pairs, comma-separated")
        parser.add_argument("--requests", type=int, default=None, help="requests per point (default 4 x c)")
        parser.add_argument("--requests-per-concurrency", type=float, default=None, help="requests = k x c")
        parser.add_argument("--duration", type=float, default=None,
                            help="seconds per point (with --requests: whichever ends first)")
        parser.add_argument("--warmup", type=int, default=0, help="warmup requests per point")
        parser.add_argument("--api", default=None, help="sglang-generate, openai-completions or openai-chat")
        parser.add_argument("--wait", action="store_true", help="follow the sweep and print its results")
        parser.add_argument("--here", action="store_true", help="run the sweep in this process")
        parser.add_argument("--timeout", type=float, default=3600.0, help="seconds --wait follows the sweep")
        parser.add_argument("--user", default=None, help="username recorded as creator")

    def handle(self, *args, **o):
        target = o["target"]
        if target.isascii() and target.isdigit():
            deployment = Deployment.objects.select_related("recipe").filter(pk=int(target)).first()
        else:
            deployment = (Deployment.objects.select_related("recipe")
                          .filter(recipe__name=target, status__in=DEPLOYMENT_ACTIVE).first())
        if deployment is None:
            raise CommandError(f"no deployment {target!r} (give an id, or the name of a recipe that is deployed)")
        grid: dict = {"concurrency": _ints(o["concurrency"]), "lengths": [x for x in o["lengths"].split(",") if x],
                      "warmup": o["warmup"]}
        if o["requests"] is not None:
            grid["requests"] = o["requests"]
        if o["requests_per_concurrency"] is not None:
            grid["requests_per_concurrency"] = o["requests_per_concurrency"]
        if o["duration"] is not None:
            grid["duration_s"] = o["duration"]
        if o["api"]:
            grid["api"] = o["api"]
        user = User.objects.filter(username=o["user"]).first() if o["user"] else None
        try:
            sweep = sweep_create(deployment=deployment, user=user, grid=grid)
        except CeilingError as exc:
            raise CommandError(str(exc)) from None
        requests = (f"{sweep.requests_total} requests" if sweep.requests_total
                    else f"as many requests as fit in {sweep.grid['duration_s']:g} s per point")
        self.stdout.write(f"sweep #{sweep.pk} created: {sweep.points_total} points, {requests}")
        if o["here"]:
            sweep_execute(sweep_id=sweep.pk)
        elif o["wait"]:
            sweep_wait(sweep=sweep, timeout_s=o["timeout"], progress=self.stdout.write)
        else:
            return
        self.stdout.write(sweep_report_text(sweep=sweep))
        if sweep.status != SweepStatus.DONE:
            raise CommandError(f"sweep #{sweep.pk} {sweep.status}: {sweep.reason}")
