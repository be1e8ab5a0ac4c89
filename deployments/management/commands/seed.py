"""``manage.py seed``: idempotently create what the embedded default needs.

Creates the role groups (viewer, operator, admin), the demo login (an admin whose password
is generated once and kept in ``var/demo-login.json``, mode 0600), registers this host as
node ``settings.CEILING_NODE_NAME`` and the seed machine ``seed-8gpu`` (from
``deployments/data/seed-8gpu.json``), then creates each example recipe that does not exist
yet. Existing recipes are never overwritten, so edits made in the UI survive a re-run.
"""
from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import transaction

from controlplane.commands import CeilingCommand
from controlplane.permissions import ROLES
from deployments.examples import example_recipes
from deployments.models import Node, Recipe
from deployments.nodes import node_local_register, node_register, seed_node_facts
from deployments.services import recipe_create

DEMO_USERNAME = "admin"


def demo_login_path() -> Path:
    return Path(settings.VAR_DIR) / "demo-login.json"


def demo_login_ensure() -> tuple[str, str | None]:
    """Return (username, password) of the demo admin.

    The password is generated once and kept in ``var/demo-login.json`` (mode 0600, set again on
    an existing file). A password
    changed later (admin, ``changepassword``) is respected: then the password returned is None
    and nothing is reset. Deleting the file makes the next run generate and set a new one.
    """
    path = demo_login_path()
    password = None
    if path.exists():
        os.chmod(path, 0o600)  # a file made by hand or by an older version: owner-only all the same
        try:
            password = json.loads(path.read_text())["password"]
        except (ValueError, KeyError):
            password = None
    fresh = not password
    if fresh:
        password = secrets.token_urlsafe(12)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"username": DEMO_USERNAME, "password": password}, f)
    user, created = User.objects.get_or_create(username=DEMO_USERNAME, defaults={"is_staff": True, "is_superuser": True})
    if created or fresh:
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
    elif not user.check_password(password):
        password = None  # changed by a person since: keep theirs
    user.groups.add(Group.objects.get_or_create(name="admin")[0])
    return DEMO_USERNAME, password


class Command(CeilingCommand):
    help = "Create role groups, the demo admin, the local and seed nodes, and the example recipes (idempotent)."

    def handle(self, *args, **options):
        for role in ROLES:
            Group.objects.get_or_create(name=role)
        username, _ = demo_login_ensure()
        local = node_local_register()
        seed = node_register(facts=seed_node_facts())
        self.stdout.write(f"nodes: {local.name} ({local.gpus.count()} GPUs, {local.numa_nodes.count()} NUMA nodes), "
                          f"{seed.name} ({seed.gpus.count()} GPUs, {seed.numa_nodes.count()} NUMA nodes)")
        user = User.objects.get(username=username)
        created = []
        for example in example_recipes():
            if Recipe.objects.filter(name=example["name"]).exists():
                continue
            with transaction.atomic():
                recipe_create(
                    user=user,
                    name=example["name"],
                    description=example.get("description", ""),
                    engine=example["engine"],
                    topology=example["topology"],
                    node=Node.objects.get(name=example["node"]),
                    spec=example["spec"],
                    change_reason="seeded example",
                )
            created.append(example["name"])
        total = Recipe.objects.count()
        self.stdout.write(f"recipes: {total} in total" + (f", created {', '.join(created)}" if created else ""))
        from kernels.services import kernel_packages_register_all

        packages, refused = kernel_packages_register_all()
        self.stdout.write(f"kernel packages: {', '.join(p.name for p in packages) or 'none'}"
                          + (f"; refused {', '.join(refused)}" if refused else ""))
