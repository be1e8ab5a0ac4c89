"""``manage.py kernel_register [DIR ...]``: register kernel packages (all of ``kernels/packages/``
when no directory is given); prints each package's grid size and any validation errors.

A package whose grid constraints leave no variant is still registered (its page shows what each
constraint pruned, which is what one needs to fix them), with a warning on stderr naming the
combinations and the per-constraint counts: no job can be created on it until the constraints
change (:func:`kernels.services.kernel_job_create` refuses an empty grid). A constraint that cannot
be evaluated for some combination (ordering a string against a number) gets the same kind of
warning, naming the constraint and the combination.
"""
from __future__ import annotations

from django.core.management.base import CommandError

from controlplane.commands import CeilingCommand
from controlplane.errors import InvalidInput
from controlplane.jsonsafe import json_spelled
from kernels.services import kernel_package_register, kernel_packages_register_all, package_grid


class Command(CeilingCommand):
    help = "Register kernel packages from kernels/packages/<name>/manifest.toml (all, or the given directories)."

    def add_arguments(self, parser):
        parser.add_argument("dirs", nargs="*", help="package directories (default: every one under kernels/packages)")

    def handle(self, *args, **options):
        errors: dict[str, dict[str, list[str]]] = {}
        if options["dirs"]:
            done = []
            for d in options["dirs"]:
                try:
                    done.append(kernel_package_register(path=d))
                except InvalidInput as exc:
                    errors[d] = exc.errors
        else:
            done, errors = kernel_packages_register_all()
        for pkg in done:
            try:
                grid = package_grid(package=pkg)
            except InvalidInput as exc:
                for path, msgs in exc.errors.items():
                    for m in msgs:
                        self.stderr.write(f"{pkg.name}: warning: the grid cannot be expanded: {path}: {m}; no job can "
                                          "run on this package", style_func=self.style.WARNING)
                continue
            self.stdout.write(f"{pkg.name}: {pkg.language}, {len(grid.variants)} variants of {grid.combinations} "
                              f"combinations ({grid.pruned_total} pruned by constraints), hash {pkg.source_hash[:12]}")
            if not grid.variants:
                pruned = "; ".join(f"#{p['index'] if p['index'] is not None else p['source']} {json_spelled(p['constraint'], 510)} pruned {p['pruned']}" for p in grid.pruned)
                self.stderr.write(f"{pkg.name}: warning: the constraints leave no variant of {grid.combinations} "
                                  f"combinations; no job can run on this package ({pruned})",
                                  style_func=self.style.WARNING)
        for name, errs in errors.items():
            for path, msgs in errs.items():
                for m in msgs:
                    self.stderr.write(f"{name}: {path}: {m}")
        if errors:
            raise CommandError(f"{len(errors)} package(s) refused")
