"""A format suffix on any API URL, an extra action's included (``/api/sweeps/2/export.csv``,
``/api/nodes/local/telemetry.json``, ``/api/kernel-whatif.json``), answers exactly as the plain URL
with that ``?format=``: an export's file with its body, content type and file name, a JSON action's
JSON, the 404 of an unknown object, the 400 naming the formats offered for a format the action
does not answer in. Never a 500.

Every suffixed route of the router is walked, with every method it takes."""
from __future__ import annotations

import pytest
from django.urls import reverse

from benchmarks.models import BenchmarkRun, BenchmarkSweep
from controlplane.api_urls import router
from deployments.choices import DeploymentStatus
from deployments.tests.factories import (
    cpu_node_create, deployment_row_create, recipe_row_create, secret_row_create,
)
from kernels.models import KernelBest
from kernels.tests.conftest import h200_node, measured_job, packages_root, toy_package  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db

MISSING = 999999
SIM_SPEC = {"served_model_name": "sim-model", "model": {"name": "example-org/sim-model"},
            "sim": {"profile": "demo-fast"}, "startup_timeout_s": 5,
            "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 39123}}}


@pytest.fixture
def objects(measured_job):  # noqa: F811
    node = cpu_node_create(name="local")
    recipe = recipe_row_create(node=node, spec=SIM_SPEC)
    deployment = deployment_row_create(recipe=recipe, status=DeploymentStatus.STOPPED)
    secret = secret_row_create()
    # the seed's sim profile, which the what-if projection reads
    sweep = BenchmarkSweep.objects.create(name="s", engine="sim", topology="single", status="done",
                                          deployment=deployment, served_model_name="DeepSeek-V4-Flash",
                                          snapshot={"spec": {"sim": {"profile": "seed-sm120-fallback"}}})
    summary = {"ttft_ms": {"mean": 50.0}, "tpot_ms": {"mean": 9.0}, "completed": 10, "output_throughput_tok_s": 100.0}
    runs = [BenchmarkRun.objects.create(sweep=sweep, status="done", concurrency=c, input_len=256, output_len=256,
                                        summary=summary) for c in (1, 2)]
    imported = BenchmarkRun.objects.create(source="imported", status="done", concurrency=1, input_len=8, output_len=8,
                                           summary=summary, original_text="{}", original_filename="bench.json")
    best = KernelBest.objects.filter(job=measured_job).first()
    return {
        "node": node.name, "recipe": recipe.pk, "secret": secret.pk, "deployment": deployment.pk,
        "process": deployment.processes.first().pk, "sweep": sweep.pk, "run": imported.pk,
        "kernel-package": measured_job.package.name, "kernel-job": measured_job.pk,
        "kernel-best": best.pk if best else MISSING, "runs": runs,
    }


def _suffixed_routes():
    """``(name, group names, {method: action})`` of every route of the router with a format
    suffix."""
    for url in router.urls:
        groups = url.pattern.regex.groupindex
        if "format" in groups:
            actions = dict(getattr(url.callback, "actions", None) or {"get": "get"})
            actions.pop("head", None)   # REST framework adds HEAD beside GET
            yield url.name, [g for g in groups if g != "format"], actions


def _query(name: str, objects: dict) -> str:
    """The query a GET of route ``name`` needs to be answered (the rest answer without one)."""
    return {
        "recipe-diff": "a=1&b=1",
        "kernel-job-chart": "shape=small",
        "kernel-whatif-list": f"sweep={objects['sweep']}&speedup=2",
        "run-compare": "ids={},{}".format(*(r.pk for r in objects["runs"])),
    }.get(name, "")


def _body(answer) -> bytes:
    return b"".join(answer.streaming_content if answer.streaming else [answer.content])


def _same(plain, suffixed, where: str) -> None:
    """The same status, content type, file name and body (a 404 that names the path asked for
    names each its own)."""
    assert suffixed.status_code != 500, where
    assert (suffixed.status_code, suffixed["Content-Type"], suffixed.get("Content-Disposition")) == (
        plain.status_code, plain["Content-Type"], plain.get("Content-Disposition")), where
    if plain.status_code == 404 and plain.wsgi_request.path.startswith("/api/nodes/"):
        # A node's key may hold a dot: its 404 names the key as asked and as read ("no node with
        # name '999999.json' (nor id 999999)"), so only the detail's presence is compared.
        assert "detail" in suffixed.json() and "detail" in plain.json(), where
        return
    asked = suffixed.wsgi_request.path.encode()
    assert _body(suffixed).replace(asked, plain.wsgi_request.path.encode()) == _body(plain), where


def test_every_suffixed_route_answers_as_its_plain_url_with_that_format(admin_api, objects):
    walked = set()
    for name, groups, actions in _suffixed_routes():
        basename = max((b for _, _, b in router.registry if name.startswith(f"{b}-")), key=len, default=None)
        for method in actions:
            for existing in ((True, False) if groups and method == "get" else (False,)):
                kwargs = {}
                for group in groups:
                    if group == "version":
                        kwargs[group] = 1
                    elif existing:
                        kwargs[group] = objects[basename]
                    else:
                        kwargs[group] = "nosuch" if group == "name" else MISSING
                query = _query(name, objects)
                plain_url = reverse(name, kwargs=kwargs)
                suffixed_url = reverse(name, kwargs={**kwargs, "format": "json"})
                assert suffixed_url.rstrip("/").endswith(".json"), suffixed_url
                send = getattr(admin_api, method)
                body = {} if method in ("post", "put", "patch") else None
                extra = {"format": "json"} if body is not None else {}
                sep = "&" if query else ""
                plain = send(f"{plain_url}?{query}{sep}format=json", body, **extra) if body is not None else send(
                    f"{plain_url}?{query}{sep}format=json")
                suffixed = send(f"{suffixed_url}?{query}", body, **extra) if body is not None else send(
                    f"{suffixed_url}?{query}")
                _same(plain, suffixed, f"{method.upper()} {suffixed_url}?{query}")
                # (the log download and a run's original refuse any format, a suffix too, before the lookup)
                if method == "get" and not existing and groups and name not in ("process-log-download",
                                                                                "run-original"):
                    assert suffixed.status_code == 404 and "detail" in suffixed.json(), suffixed_url
                walked.add(name)
    # every action the new user tried is among those walked
    assert {"sweep-export", "run-export", "recipe-dry-run", "recipe-diff", "node-telemetry", "deployment-telemetry",
            "kernel-whatif-list", "kernel-job-export", "kernel-job-variants", "run-compare", "recipe-version-detail",
            "process-log-download", "sweep-cancel", "deployment-stop", "run-import-results"} <= walked


@pytest.mark.parametrize("route", ["sweep", "run", "kernel-job"])
@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_an_export_with_a_suffix_is_the_file_of_its_format_query(viewer_api, objects, route, fmt):
    pk = objects[route] if route != "run" else objects["runs"][0].pk
    plain = viewer_api.get(f"/api/{route}s/{pk}/export/?format={fmt}")
    suffixed = viewer_api.get(f"/api/{route}s/{pk}/export.{fmt}")
    assert plain.status_code == 200 and plain["Content-Type"].startswith("text/csv" if fmt == "csv" else
                                                                        "application/json")
    assert f'.{fmt}"' in plain["Content-Disposition"]
    _same(plain, suffixed, f"{route} export.{fmt}")
    # with the trailing slash the route also takes
    _same(plain, viewer_api.get(f"/api/{route}s/{pk}/export.{fmt}/"), f"{route} export.{fmt}/")


def test_the_urls_the_new_user_tried_answer(viewer_api, objects):
    sweep, run, recipe, deployment = objects["sweep"], objects["runs"][0].pk, objects["recipe"], objects["deployment"]
    for url in (f"/api/sweeps/{sweep}/export.csv", f"/api/sweeps/{sweep}/export.json", f"/api/runs/{run}/export.csv",
                f"/api/recipes/{recipe}/dry-run.json", f"/api/recipes/{recipe}/diff.json?a=1&b=1",
                "/api/nodes/local/telemetry.json", f"/api/deployments/{deployment}/telemetry.json",
                f"/api/kernel-whatif.json?sweep={sweep}&speedup=2", f"/api/recipes/{recipe}.json"):
        answer = viewer_api.get(url)
        assert answer.status_code == 200, (url, answer.content[:300])
    assert viewer_api.get("/api/nodes/local/telemetry.json").json()["group"] == "node-local"
    assert viewer_api.get(f"/api/recipes/{recipe}/diff.json?a=1&b=1").json() == {"a": 1, "b": 1, "changes": []}


def test_an_unknown_object_with_a_suffix_is_the_json_404(viewer_api, objects):
    for url in (f"/api/sweeps/{MISSING}/export.csv", f"/api/runs/{MISSING}/export.json",
                f"/api/deployments/{MISSING}/telemetry.json", "/api/nodes/nosuch/telemetry.json"):
        answer = viewer_api.get(url)
        assert answer.status_code == 404 and answer["Content-Type"] == "application/json", url
        assert set(answer.json()) == {"detail"}, url
    assert viewer_api.get(f"/api/sweeps/{MISSING}/export.csv").json() == {"detail": f"no benchmark sweep with id {MISSING}"}


def test_a_suffix_the_action_does_not_answer_in_is_the_400_of_that_format_query(viewer_api, objects):
    sweep, deployment = objects["sweep"], objects["deployment"]
    for suffixed, plain in ((f"/api/sweeps/{sweep}/export.xml", f"/api/sweeps/{sweep}/export/?format=xml"),
                            ("/api/nodes/local/telemetry.csv", "/api/nodes/local/telemetry/?format=csv"),
                            (f"/api/deployments/{deployment}/telemetry.csv",
                             f"/api/deployments/{deployment}/telemetry/?format=csv"),
                            (f"/api/kernel-whatif.csv?sweep={sweep}&speedup=2",
                             f"/api/kernel-whatif/?sweep={sweep}&speedup=2&format=csv"),
                            (f"/api/processes/{objects['process']}/log/download.json",
                             f"/api/processes/{objects['process']}/log/download/?format=json")):
        answer = viewer_api.get(suffixed)
        assert answer.status_code == 400 and answer["Content-Type"] == "application/json", suffixed
        assert answer.json() == viewer_api.get(plain).json(), suffixed
    assert viewer_api.get(f"/api/sweeps/{sweep}/export.xml").json() == {
        "format": ["must be one of csv, json; got 'xml'"]}
    assert viewer_api.get("/api/nodes/local/telemetry.csv").json() == {"format": ["must be one of json, api; got 'csv'"]}


def test_a_suffix_and_a_format_query_together_are_the_format_given_twice(viewer_api, objects):
    answer = viewer_api.get(f"/api/sweeps/{objects['sweep']}/export.csv?format=json")
    assert answer.status_code == 400 and answer.json() == {"format": ["is given 2 times (csv, json): give it once"]}


def test_the_browsable_suffix_of_an_action_is_its_page(viewer_api, objects):
    answer = viewer_api.get(f"/api/deployments/{objects['deployment']}/telemetry.api")
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/html")


def test_the_schema_and_the_token_take_a_suffix_too(viewer_api, viewer):
    for fmt in ("json", "yaml"):
        plain = viewer_api.get(f"/api/schema/?format={fmt}")
        suffixed = viewer_api.get(f"/api/schema.{fmt}")
        assert plain.status_code == 200 and suffixed.status_code == 200, fmt
        assert suffixed["Content-Type"] == plain["Content-Type"] and suffixed.content == plain.content, fmt
    assert viewer_api.get("/api/schema.xml").json() == viewer_api.get("/api/schema/?format=xml").json()
    assert viewer_api.get("/api/schema.xml").status_code != 404
    from rest_framework.test import APIClient
    body = {"username": "vera-viewer", "password": "correct-horse-battery"}
    answer = APIClient().post("/api/auth/token.json", body, format="json")
    assert answer.status_code == 200 and len(answer.json()["token"]) == 40


def test_a_runs_original_takes_no_format_and_is_served_as_stored(viewer_api, objects):
    run = objects["run"]
    plain = viewer_api.get(f"/api/runs/{run}/original/")
    assert plain.status_code == 200 and plain["Content-Type"] == "application/octet-stream"
    for url, fmt in ((f"/api/runs/{run}/original.csv", "csv"), (f"/api/runs/{run}/original/?format=json", "json"),
                     (f"/api/runs/{run}/original/?format=api", "api"), (f"/api/runs/{run}/original.json", "json")):
        answer = viewer_api.get(url)
        assert answer.status_code == 400 and answer["Content-Type"] == "application/json", url
        assert answer.json() == {"format": [
            f"the original file is served as stored only: leave format out; got '{fmt}'"]}, url


@pytest.mark.parametrize("route", ["sweep", "run", "kernel-job"])
@pytest.mark.parametrize("fmt", ["CSV", "Json"])
def test_a_format_is_read_in_any_case_as_a_suffix_a_query_and_a_page_export(viewer_api, viewer, objects, route, fmt):
    from django.test import Client
    pk = objects[route] if route != "run" else objects["runs"][0].pk
    lower = fmt.lower()
    plain = viewer_api.get(f"/api/{route}s/{pk}/export/?format={lower}")
    assert plain.status_code == 200 and f'{route}-{pk}.{lower}"' in plain["Content-Disposition"]
    _same(plain, viewer_api.get(f"/api/{route}s/{pk}/export.{fmt}"), f"{route} export.{fmt}")
    _same(plain, viewer_api.get(f"/api/{route}s/{pk}/export/?format={fmt}"), f"{route} export/?format={fmt}")
    page = Client()
    page.force_login(viewer)
    prefix = "kernels/jobs" if route == "kernel-job" else f"benchmarks/{route}s"
    answer = page.get(f"/{prefix}/{pk}/export.{fmt}")
    assert answer.status_code == 200 and answer["Content-Type"] == page.get(f"/{prefix}/{pk}/export.{lower}")["Content-Type"]
    assert answer["Content-Disposition"].endswith(f'-{pk}.{lower}"')


def test_a_json_suffix_and_format_query_in_upper_case_answer_as_in_lower_case(viewer_api, objects):
    recipe, run = objects["recipe"], objects["runs"][0].pk
    for url, same in ((f"/api/recipes/{recipe}.JSON", f"/api/recipes/{recipe}.json"),
                      (f"/api/recipes/{recipe}/?format=JSON", f"/api/recipes/{recipe}/?format=json"),
                      ("/api/nodes/local/telemetry.JSON", "/api/nodes/local/telemetry.json"),
                      (f"/api/runs/compare.CSV?ids={run},{objects['runs'][1].pk}",
                       f"/api/runs/compare.csv?ids={run},{objects['runs'][1].pk}"),
                      ("/api/schema.JSON", "/api/schema.json")):
        answer, expected = viewer_api.get(url), viewer_api.get(same)
        assert expected.status_code == 200, same
        _same(expected, answer, url)
    # a format offered by none is still the 400 naming those offered, whatever its case
    assert viewer_api.get(f"/api/sweeps/{objects['sweep']}/export.XML").json() == {
        "format": ["must be one of csv, json; got 'xml'"]}
