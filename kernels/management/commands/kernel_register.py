"""``manage.py kernel_register [DIR ...]``: register kernel packages (all of ``kernels/packages/``
when no directory is given); prints each package's grid size and any validation errors."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from controlplane.errors import InvalidInput
from kernels.services import kernel_package_register, kernel_packages_register_all, package_grid


class Command(BaseCommand):
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
            grid = package_grid(package=pkg)
            self.stdout.write(f"{pkg.name}: {pkg.language}, {len(grid.variants)} variants of {grid.combinations} "
                              f"combinations ({grid.pruned_total} pruned by constraints), hash {pkg.source_hash[:12]}")
        for name, errs in errors.items():
            for path, msgs in errs.items():
                for m in msgs:
                    self.stderr.write(f"{name}: {path}: {m}")
        if errors:
            raise CommandError(f"{len(errors)} package(s) refused")
