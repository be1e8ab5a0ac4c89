"""``manage.py demo``: report what the running demo offers (URL, login, recipes, a dry-run).

Run by ``make demo`` after the services are up; it reads rows only and changes nothing.
"""
from __future__ import annotations

import shlex

from django.conf import settings
from django.core.management.base import BaseCommand

from deployments.management.commands.seed import demo_login_ensure
from deployments.models import Recipe
from deployments.services import recipe_plan


class Command(BaseCommand):
    help = "Print the demo's URL, login, recipes and the local PD recipe's launch plan."

    def handle(self, *args, **options):
        base = settings.CEILING_UI_URL.rstrip("/")
        username, password = demo_login_ensure()
        out = self.stdout
        out.write("")
        out.write(f"Ceiling is up: {base}/")
        if password:
            out.write(f"  login:     {username} / {password}   (kept in {settings.VAR_DIR}/demo-login.json)")
        else:
            out.write(f"  login:     {username} / (the password you set; delete {settings.VAR_DIR}/demo-login.json "
                      "and re-run to get a new one)")
        out.write(f"  API docs:  {base}/api/docs/     admin: {base}/admin/")
        out.write("")
        out.write("Recipes:")
        for recipe in Recipe.objects.select_related("node").order_by("name"):
            out.write(f"  {recipe.name:20s} {recipe.engine:8s} {recipe.topology:6s} node={recipe.node.name:10s} "
                      f"v{recipe.version}  {base}/recipes/{recipe.pk}/dry-run/")
        pd = Recipe.objects.filter(name="local-sim-pd").first()
        if pd is not None:
            out.write("")
            out.write(f"Dry-run of {pd.name} v{pd.version} on node {pd.node.name}:")
            for proc in recipe_plan(recipe=pd).processes:
                out.write(f"  [{proc.role}] cpus={proc.cpus or '-'} numa={proc.numa_node} pin={proc.pin_method} "
                          f"gpus={proc.gpu_ids or '-'} ports={proc.ports}")
                out.write(f"    $ {shlex.join(proc.argv)}")
        out.write("")
        out.write("Stop everything with: make stop")
