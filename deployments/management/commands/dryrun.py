"""``manage.py dryrun <recipe> [--version N] [--json]``: print a recipe's launch plan.

Thin over :func:`deployments.services.recipe_plan`: nothing is started, no secret value is
read, and every env shown is redacted. Text output gives, per process, the role, argv as one
shell-quoted line (for reading) and as a JSON list (exact), env, pinning, GPUs, ports and
health URL; ``--json`` prints what the API's dry-run answers, with the same keys: ``{"recipe":
id, "recipe_name": name, "version": n, "plan": the plan's to_dict()}``.

Refused input exits with status 2, as argparse's refusal of a bad option: no recipe by that name
(an earlier name of a renamed recipe is told as such, naming the name to give: ``recipe 't1b' was
renamed 't1b-renamed' (at v3); use that name``),
a ``--version`` that is not a version number (the API's message for ``?version=``: ``--version must be
a whole number between 1 and 2147483647, got 'abc'``) or one the recipe does not have, on one line; a spec that does not render
on its node, every problem at its path on its own line under ``recipe NAME does not render on node
NODE:``.
"""
from __future__ import annotations

import json
import shlex

from django.core.management.base import CommandParser

from controlplane.commands import CeilingCommand, refused, refused_list
from controlplane.errors import CeilingError, InvalidInput
from controlplane.jsonsafe import json_spelled
from deployments.api.serializers import version_number
from deployments.models import Recipe, recipe_name_shown
from deployments.selectors import recipe_renamed_text
from deployments.services import recipe_name_at, recipe_plan


class Command(CeilingCommand):
    help = "Render a recipe's launch plan (argv, env redacted, pinning, GPUs, ports) without starting anything."

    def create_parser(self, prog_name: str, subcommand: str, **kwargs) -> CommandParser:
        # Django gives every command --version (its own version); here --version is the
        # recipe version, so later definitions must win over the base one.
        kwargs.setdefault("conflict_handler", "resolve")
        return super().create_parser(prog_name, subcommand, **kwargs)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("recipe", help="recipe name")
        # Taken as text and judged as the API judges ?version= (deployments.api.serializers.version_number),
        # so a bad value gets the API's message, not argparse's "invalid int value".
        parser.add_argument("--version", default=None, help="recipe version (default: current)")
        parser.add_argument("--json", action="store_true", help="print the plan as JSON")

    def handle(self, *args, **options) -> None:
        recipe = Recipe.objects.select_related("node").filter(name=options["recipe"]).first()
        if recipe is None:
            name = options["recipe"]
            raise refused(recipe_renamed_text(name) or f"no recipe named {json_spelled(name)}")
        version = None
        if options["version"] is not None:
            try:
                version = version_number(options["version"])
            except ValueError as exc:
                raise refused(f"--version {exc}") from None
        try:
            plan = recipe_plan(recipe=recipe, version=version, warn_ports=True)
        except InvalidInput as exc:
            lines = [f"{path}: {msg}" for path, msgs in exc.errors.items() for msg in msgs]
            raise refused_list(f"recipe {recipe.name_shown} does not render on node {recipe.node.name}:", lines) from None
        except CeilingError as exc:
            raise refused(str(exc)) from None
        shown_version = version or recipe.version
        # The name the recipe had at that version (what a deployment of it would be named), as the API
        # says it: a stored secret's value in it masked.
        shown_name = recipe_name_shown(recipe_name_at(recipe=recipe, version=version))
        if options["json"]:
            # The API's dry-run body (deployments.api.views.RecipeViewSet.dry_run), key for key.
            data = {"recipe": recipe.pk, "recipe_name": shown_name, "version": shown_version, "plan": plan.to_dict()}
            self.stdout.write(json.dumps(data, indent=2))
            return
        out = self.stdout
        renamed = f" (now {recipe.name_shown})" if shown_name != recipe.name_shown else ""
        out.write(f"recipe {shown_name} v{shown_version}{renamed}: engine {plan.engine}, topology {plan.topology}, "
                  f"node {plan.node}, model {plan.served_model_name}")
        out.write(f"entry {plan.entry_url or 'none from this host (see the warnings)'}; startup timeout {plan.startup_timeout_s} s; "
                  f"stop grace {plan.stop_grace_s} s; restart {plan.restart['policy']}")
        for warning in plan.warnings:
            out.write(f"warning: {warning}")
        for proc in plan.processes:
            out.write("")
            out.write(f"[{proc.role} #{proc.ordinal}]")
            out.write(f"  $ {shlex.join(proc.argv_shown())}")
            out.write(f"  argv: {json.dumps(proc.argv_shown())}")
            for name, value in proc.env_redacted.items():
                out.write(f"  env {name}={value}")
            numa = proc.numa_node if proc.numa_node is not None else "-"
            out.write(f"  pinning: {proc.pin_method}; cpus {proc.cpus or '-'}; NUMA node {numa}; "
                      f"memory nodes {proc.mem_nodes or '-'}")
            out.write(f"  gpus: {','.join(str(g) for g in proc.gpu_ids) or '-'}")
            out.write(f"  ports: {', '.join(f'{k}={v}' for k, v in proc.ports.items())}")
            # as this host reaches them; the note says what the node agent probes on its node
            health, note = plan.health_url_from_here(proc)
            generate = plan.health_url_from_here(proc, proc.generate_url)[0]
            out.write(f"  health: {health}" + (f"; generate: {generate}" if generate else "")
                      + (f" ({note})" if note else ""))
