"""The README's curl examples of the API work as written on a freshly seeded database: each is
parsed from README.md and sent through the real URLs, in order."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.test import Client

from deployments.examples import example_recipes
from deployments.models import Recipe

README = Path(django_settings.BASE_DIR) / "README.md"


@pytest.fixture
def var_dir(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    settings.CEILING_MODEL_ROOTS = ["/models", str(tmp_path / "models")]
    return tmp_path


def _curl_commands() -> list[list[str]]:
    """Each ``curl`` of the README's token block as its words, continuation lines joined, the
    token request taken out of its ``TOKEN=$(... | python3 ...)``."""
    text = README.read_text()
    block = text.split("TOKEN=$(", 1)[1].split("```", 1)[0]
    lines = block.replace("\\\n", " ").splitlines()
    commands = []
    for line in lines:
        words = shlex.split(line.split(" | python3", 1)[0], comments=True)
        if words and words[0] == "curl":
            commands.append(words)
    return commands


def _send(client: Client, words: list[str], token: str | None, recipe_ids: dict[str, int]):
    method, data, headers, url = "GET", None, {}, None
    it = iter(words[1:])
    for word in it:
        if word == "-X":
            method = next(it)
        elif word == "-d":
            data = next(it)
        elif word == "-H":
            key, value = next(it).split(": ", 1)
            headers[key] = value.replace("$TOKEN", token or "")
        elif word.startswith("http"):
            url = word
        else:
            assert word == "-s", word
    path = url.removeprefix("http://127.0.0.1:8000")
    # ids of a fresh install are 1, 2, ...; this database may have used some before.
    path = re.sub(r"/recipes/([0-9]+)/", lambda m: f"/recipes/{recipe_ids[m.group(1)]}/", path)
    return client.generic(method, path, data or "", content_type=headers.get("Content-Type", ""),
                          headers={k: v for k, v in headers.items() if k != "Content-Type"})


def test_the_readme_api_examples_work_right_after_seeding(db, var_dir):
    call_command("seed", stdout=open("/dev/null", "w"))
    password = json.loads((var_dir / "demo-login.json").read_text())["password"]
    pks = list(Recipe.objects.order_by("pk").values_list("pk", "name"))
    assert [name for _pk, name in pks] == [e["name"] for e in example_recipes()]
    recipe_ids = {str(i): pk for i, (pk, _name) in enumerate(pks, start=1)}
    commands = _curl_commands()
    assert len(commands) >= 2, commands
    client = Client()
    token = None
    for words in commands:
        if "/api/auth/token/" in " ".join(words):
            words = [w.replace('"..."', json.dumps(password)) for w in words]
            response = _send(client, words, None, recipe_ids)
            assert response.status_code == 200, response.content
            token = response.json()["token"]
            continue
        response = _send(client, words, token, recipe_ids)
        assert response.status_code == 200, (words, response.content[:500])
    recipe = Recipe.objects.get(pk=recipe_ids["3"])
    assert recipe.name == "local-sim-pd"
    assert recipe.version == 3 and recipe.description != "edited from the API"
    assert [v.history_change_reason for v in recipe.history.order_by("history_date")] == [
        "seeded example", "try an edit", "Reverted to version 1"]


def _sweep_commands() -> list[list[str]]:
    """Each ``manage.py sweep`` line of the README as its words after ``sweep``."""
    text = README.read_text().replace("\\\n", " ")
    return [shlex.split(line.split("manage.py sweep", 1)[1], comments=True)
            for line in text.splitlines() if "manage.py sweep " in line and line.lstrip().startswith(".venv")]


def test_the_readme_sweep_examples_parse_and_name_a_user_the_demo_has(db, var_dir):
    from benchmarks.management.commands.sweep import Command as SweepCommand
    from deployments.management.command_user import command_user

    call_command("seed", stdout=open("/dev/null", "w"))
    commands = _sweep_commands()
    assert len(commands) >= 3, commands
    parser = SweepCommand().create_parser("manage.py", "sweep")
    users = []
    for words in commands:
        options = parser.parse_args(words)
        if options.user is not None:
            users.append(options.user)
    assert users
    for username in users:
        assert command_user(username, role="operator", what="a sweep") is not None


def test_the_readme_recipe_table_lists_the_examples_in_the_order_the_seed_creates_them():
    """The README says the seed creates its five recipes in the table's order, so that recipe ids
    on a fresh install can be read off the table (the curl examples use recipe 3)."""
    text = README.read_text().split("## Example recipes", 1)[1].split("\n## ", 1)[0]
    names = re.findall(r"^\| `([a-z0-9-]+)` \|", text, flags=re.M)
    assert names == [recipe["name"] for recipe in example_recipes()]
    assert names[2] == "local-sim-pd"


def test_the_readme_demo_steps_name_every_recipe_the_demo_deploys_and_proves():
    """Step 7 of the README's demo steps names each recipe the demo deploys and proves (pids,
    pinning read back, a streamed request), and those are every recipe it sweeps in step 8: no
    deployment shows on the wall that the demo did not prove."""
    from deployments.management.commands.demo import DEMO_RECIPES, DEMO_SWEEPS

    text = README.read_text()
    step7 = text.split("\n7. deploys ", 1)[1].split("\n8. ", 1)[0]
    assert [n for n in re.findall(r"`(local-[a-z-]+)`", step7)] == list(DEMO_RECIPES)
    assert "the wall shows three live deployments" in " ".join(step7.split())
    assert {name for name, *_ in DEMO_SWEEPS} == set(DEMO_RECIPES) == {
        "local-sim-pd", "local-llamacpp", "local-sim-single"}
