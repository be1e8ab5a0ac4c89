"""The OpenAPI schema's descriptions are plain text: the Sphinx roles of the docstrings they come
from are written as the name they point at (controlplane.api.postprocess_plain_descriptions), and no
description names the code behind the API (a function, class or constant of the project, a dotted
module path, a call) where it should say what the value is."""
import ast
import json
import re
from pathlib import Path

import pytest

from controlplane.api import plain_description

ROLES = (":func:`", ":meth:`", ":class:`", ":data:`", ":attr:`", ":mod:`")


def _texts(node, key=None):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _texts(v, k)
    elif isinstance(node, list):
        for item in node:
            yield from _texts(item, key)
    elif key in ("description", "summary") and isinstance(node, str):
        yield node


@pytest.mark.django_db
def test_no_description_in_the_schema_holds_a_sphinx_role(viewer_api):
    schema = viewer_api.get("/api/schema/?format=json").json()
    texts = list(_texts(schema))
    assert len(texts) > 100
    leaks = [t for t in texts if any(role in t for role in ROLES)]
    assert leaks == []
    job = schema["components"]["schemas"]["JobCreateRequest"]["description"]
    assert "as the job's own checks judge it" in job and "kernel_job_check" not in job
    assert ":func:" not in json.dumps(schema)


ROOT = Path(__file__).resolve().parents[2]
#: The project's own packages, whose names a description must not leak.
PACKAGES = ("controlplane", "deployments", "benchmarks", "kernels")
#: Keys of JSON objects the schema gives no property for, named in prose as what they are.
JSON_KEYS = {"requests_sent"}
# Key suffixes a description names as units ("each value in the unit its key names: _s seconds,
# _ms milliseconds"): words of the API's vocabulary, not names of code.
UNIT_SUFFIXES = {"_s", "_ms", "_tok_s", "_req_s"}


def _project_names() -> set[str]:
    """Every function, method and class name of the project's code, and every module-level name
    (constants such as HELD_AT_HELP), tests and migrations left out."""
    names: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "tests" in path.parts or "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text())
            names.update(node.name for node in ast.walk(tree)
                         if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))
            for node in tree.body:
                targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
                names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _schema_names(node) -> set[str]:
    """The names the schema itself gives: properties, parameters and enum values."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                found.update(value)
            elif key == "parameters" and isinstance(value, list):
                found.update(p["name"] for p in value if isinstance(p, dict) and "name" in p)
            elif key == "enum" and isinstance(value, list):
                found.update(str(v) for v in value)
            found |= _schema_names(value)
    elif isinstance(node, list):
        for item in node:
            found |= _schema_names(item)
    return found


def _looks_like_code(word: str) -> bool:
    """snake_case, UPPER_CASE or CamelCase: a name written as code, not a word of prose."""
    return "_" in word or bool(re.search(r"[a-z][A-Z]", word))


def code_names_in(text: str, project: set[str], allowed: set[str]) -> list[str]:
    """The names of the project's code ``text`` holds: a project name written as code (not one of
    ``allowed``, nor a URL's part or a dotted key's last part: ``/get_server_info``,
    ``spec.sim.gpus_modelled``), a call (``progress_message()``) or a dotted module path
    (``benchmarks.models``; not a file name such as ``benchmarks.md``)."""
    leaks = []
    for match in re.finditer(r"[A-Za-z_][A-Za-z0-9_]*", text):
        word, before = match.group(0), text[match.start() - 1:match.start()]
        if word in project and word not in allowed and _looks_like_code(word) and before not in ("/", "."):
            leaks.append(word)
    leaks += re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*\(\)", text)
    for match in re.finditer(r"\b(%s)\.([a-z_]+)\b" % "|".join(PACKAGES), text):
        package, module = match.groups()
        if (ROOT / package / f"{module}.py").exists() or (ROOT / package / module).is_dir():
            leaks.append(match.group(0))
    return leaks


def test_the_detector_finds_code_names_and_leaves_prose():
    project = {"sweep_queue_note", "HELD_AT_HELP", "BenchmarkRun", "progress_message", "gpus_modelled", "Sweep"}
    text = ("why it waits (sweep_queue_note); see HELD_AT_HELP and BenchmarkRun, progress_message() "
            "and benchmarks.models; spec.sim.gpus_modelled, /get_server_info, docs/benchmarks.md, a Sweep")
    assert code_names_in(text, project, set()) == [
        "sweep_queue_note", "HELD_AT_HELP", "BenchmarkRun", "progress_message", "progress_message()",
        "benchmarks.models"]


@pytest.mark.django_db
def test_no_description_names_the_code_behind_the_api(viewer_api):
    schema = viewer_api.get("/api/schema/?format=json").json()
    project = _project_names()
    assert {"sweep_queue_note", "HELD_AT_HELP", "BenchmarkRun", "requests_total_known"} <= project
    allowed = _schema_names(schema) | JSON_KEYS | UNIT_SUFFIXES
    leaks = {text[:80]: found for text in _texts(schema) if (found := code_names_in(text, project, allowed))}
    assert leaks == {}


@pytest.mark.django_db
def test_the_sweep_describes_its_fields_in_words(viewer_api):
    schema = viewer_api.get("/api/schema/?format=json").json()["components"]["schemas"]
    sweep = schema["Sweep"]
    for name in ("sweep_queue_note", "HELD_AT_HELP", "progress_message", "requests_total_known",
                 "SHARED_RECHECK_S", "HELD_STALE_S"):
        assert name not in json.dumps(sweep), name
    assert "renewed every 5 s" in sweep["properties"]["held_at"]["description"]
    assert "BenchmarkRun" not in schema["Run"]["description"]
    assert "ANALYSIS_VERSION" not in schema["SweepAnalysis"]["properties"]["version"]["description"]


@pytest.mark.django_db
def test_created_by_says_what_it_is_not_the_username_rules(viewer_api):
    schema = viewer_api.get("/api/schema/?format=json").json()["components"]["schemas"]
    found = {name: component["properties"]["created_by"]
             for name, component in schema.items() if "created_by" in component.get("properties", {})}
    assert {"Sweep", "Job", "Recipe", "Deployment"} <= set(found)
    for name, field in found.items():
        assert field.get("readOnly") and field.get("nullable"), name
        assert field["description"].startswith("username of the user who "), (name, field)
        assert "150 characters" not in field["description"] and "Required" not in field["description"]


@pytest.mark.django_db
def test_the_import_limit_the_description_gives_is_the_codes(viewer_api):
    from benchmarks.importers import MAX_REPORTED_PROBLEMS

    schema = viewer_api.get("/api/schema/?format=json").json()
    description = " ".join(schema["paths"]["/api/runs/import/"]["post"]["description"].split())
    assert f"at most {MAX_REPORTED_PROBLEMS} places" in description


def test_a_reference_reads_as_its_last_name_or_its_title():
    assert plain_description("see :func:`kernels.services.kernel_job_check` and :meth:`to_internal_value`.") == (
        "see kernel_job_check and to_internal_value.")
    assert plain_description(":class:`~benchmarks.models.BenchmarkRun`, :attr:`the total <x.Y.total>`") == (
        "BenchmarkRun, the total")
    assert plain_description("``code`` and a ratio 1:2 stay") == "``code`` and a ratio 1:2 stay"
