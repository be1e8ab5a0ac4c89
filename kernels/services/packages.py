"""Kernel packages: register a package directory (or all of ``kernels/packages/``) as a
:class:`kernels.models.KernelPackage` row.

Part of :mod:`kernels.services`, which lists the rules and where they come from.
"""
from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db import transaction

from controlplane.errors import InvalidInput
from kernels.manifest import ManifestError, manifest_load, package_source_hash
from kernels.models import KernelPackage
from kernels.services.common import _invalid, packages_dir


def kernel_package_register(*, path: str | Path) -> KernelPackage:
    """Validate the package directory ``path`` (:func:`kernels.manifest.manifest_load`) and create
    or update its :class:`KernelPackage` row (manifest JSON, source hash, path). Re-registering an
    unchanged package writes nothing. ``path`` must lie inside :func:`packages_dir`.

    Raises :class:`InvalidInput` with ``manifest.<field path>`` keys for an invalid manifest and
    ``path`` for a directory outside the packages root.
    """
    path = Path(path)
    if not path.is_absolute():
        path = Path(settings.BASE_DIR) / path
    root = packages_dir().resolve()
    if not path.resolve().is_relative_to(root):
        raise InvalidInput({"path": [f"{path} is not inside the packages directory {root}"]})
    try:
        manifest = manifest_load(path)
    except ManifestError as exc:
        raise _invalid(exc) from None
    digest = package_source_hash(manifest)
    base = Path(settings.BASE_DIR).resolve()
    stored_path = str(path.resolve().relative_to(base)) if path.resolve().is_relative_to(base) else str(path.resolve())
    fields = {"title": manifest.title, "language": manifest.language, "description": manifest.description,
              "manifest": manifest.as_dict(), "source_hash": digest, "path": stored_path}
    with transaction.atomic():
        pkg = KernelPackage.objects.select_for_update().filter(name=manifest.name).first()
        if pkg is None:
            return KernelPackage.objects.create(name=manifest.name, **fields)
        if all(getattr(pkg, k) == v for k, v in fields.items()):
            return pkg
        for k, v in fields.items():
            setattr(pkg, k, v)
        pkg._change_reason = "re-registered: manifest or sources changed"
        pkg.save()
        return pkg


def kernel_packages_register_all() -> tuple[list[KernelPackage], dict[str, dict[str, list[str]]]]:
    """Register every directory of :func:`packages_dir` that holds a ``manifest.toml``.

    Returns ``(registered, errors)``: the packages stored and, per directory name, the
    validation errors of those that were refused (one bad package does not stop the others).
    """
    done: list[KernelPackage] = []
    errors: dict[str, dict[str, list[str]]] = {}
    root = packages_dir()
    if not root.is_dir():
        return done, errors
    for child in sorted(root.iterdir()):
        if not (child / "manifest.toml").is_file():
            continue
        try:
            done.append(kernel_package_register(path=child))
        except InvalidInput as exc:
            errors[child.name] = exc.errors
    return done, errors
