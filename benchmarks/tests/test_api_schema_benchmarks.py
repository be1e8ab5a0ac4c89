"""The OpenAPI schema of the sweeps and runs endpoints says what they really answer: each
operation lists the status codes it returns (401 and 403 included), and every body a real sweep
against a real ``sim`` server produces (the run, records, exports, analysis, comparison, errors)
and every 401 and 403 has exactly the keys and types its documented response has."""
from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun
from benchmarks.services import sweep_execute
from benchmarks.services.runs import BEST_METRICS, COMPARE_FIELDS
from benchmarks.tests.sweep_support import sim_deployment_create, sim_start

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180), pytest.mark.django_db(transaction=True)]

GRID = {"concurrency": [1], "lengths": "32:16", "requests": 4}
# The sim's modelled times are multiplied by this: its decode steps take 100 ms instead of 5 ms. At
# 5 ms a busy host (the test process and the engine sharing a couple of cores) often reads several
# tokens of one request in one network read; when a tenth of the gaps are zero the run is flagged
# ``itl_coalesced`` and, rightly, named best for no TTFT, TPOT or ITL statistic. A client stalled
# for a whole 100 ms step is far rarer, so the run is measured cleanly and is named best for every
# metric it has.
SIM_TIME_SCALE = 20.0


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


@pytest.fixture(scope="module")
def steady_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real sim engine with decode steps long enough that its tokens reach the client one by one."""
    base, proc = sim_start(tmp_path_factory.mktemp("sim") / "sim.log", time_scale=SIM_TIME_SCALE)
    yield base
    proc.terminate()
    proc.wait(timeout=10)


def _schema(client) -> dict[str, Any]:
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return response.json()


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _allows_null(schema: dict[str, Any], node: dict[str, Any]) -> bool:
    node = _resolve(schema, node)
    return bool(node.get("nullable")) or None in node.get("enum", []) or any(
        _allows_null(schema, sub) for sub in node.get("oneOf", []))


def conforms(schema: dict[str, Any], value: Any, node: dict[str, Any], where: str = "body") -> None:
    """Assert ``value`` matches the OpenAPI 3.0 ``node``: objects with declared properties hold
    every required key and no undeclared one, recursively; scalars have the declared type; null
    only where the schema says nullable."""
    node = _resolve(schema, node)
    if value is None:
        assert _allows_null(schema, node), f"{where}: null, but the schema does not allow null: {node}"
        return
    for sub in node.get("allOf", []):
        conforms(schema, value, sub, where)
    if "oneOf" in node:
        failures = []
        for sub in node["oneOf"]:
            try:
                conforms(schema, value, sub, where)
                break
            except AssertionError as exc:
                failures.append(str(exc))
        else:
            raise AssertionError(f"{where}: matches none of oneOf: {failures}")
    kind = node.get("type")
    if "enum" in node:
        assert value in node["enum"], f"{where}: {value!r} not in {node['enum']}"
    if kind == "object":
        assert isinstance(value, dict), f"{where}: {value!r} is not an object"
        props = node.get("properties")
        if props is not None:
            assert set(node.get("required", [])) <= set(value), \
                f"{where}: missing {sorted(set(node.get('required', [])) - set(value))}"
            assert set(value) <= set(props), f"{where}: undocumented {sorted(set(value) - set(props))}"
            for key, item in value.items():
                conforms(schema, item, props[key], f"{where}.{key}")
        elif isinstance(node.get("additionalProperties"), dict):
            for key, item in value.items():
                conforms(schema, item, node["additionalProperties"], f"{where}.{key}")
    elif kind == "array":
        assert isinstance(value, list), f"{where}: {value!r} is not an array"
        for i, item in enumerate(value):
            conforms(schema, item, node.get("items", {}), f"{where}.{i}")
    elif kind == "integer":
        assert isinstance(value, int) and not isinstance(value, bool), f"{where}: {value!r} is not an integer"
    elif kind == "number":
        assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{where}: {value!r} is not a number"
    elif kind == "string":
        assert isinstance(value, str), f"{where}: {value!r} is not a string"
    elif kind == "boolean":
        assert isinstance(value, bool), f"{where}: {value!r} is not a boolean"


def _operation(schema: dict[str, Any], path: str, method: str) -> dict[str, Any]:
    return schema["paths"][path][method]


def _body(schema: dict[str, Any], path: str, method: str, code: int, media: str = "application/json"):
    return _operation(schema, path, method)["responses"][str(code)]["content"][media]["schema"]


def check(schema: dict[str, Any], response, path: str, method: str, media: str = "application/json") -> None:
    """The response's status is documented for the operation and its JSON body matches it."""
    responses = _operation(schema, path, method)["responses"]
    assert str(response.status_code) in responses, f"{method} {path}: {response.status_code} is not documented"
    conforms(schema, response.json(), _body(schema, path, method, response.status_code, media),
             f"{method} {path} {response.status_code}")


def test_the_schema_lists_the_real_status_codes(viewer_api) -> None:
    schema = _schema(viewer_api)
    codes = {(path, method): sorted(_operation(schema, path, method)["responses"]) for path, method in (
        ("/api/sweeps/", "post"), ("/api/sweeps/{id}/cancel/", "post"), ("/api/sweeps/{id}/analysis/", "get"),
        ("/api/sweeps/{id}/export/", "get"), ("/api/runs/{id}/records/", "get"), ("/api/runs/{id}/export/", "get"),
        ("/api/runs/{id}/original/", "get"), ("/api/runs/import/", "post"), ("/api/runs/compare/", "get"))}
    assert codes == {
        ("/api/sweeps/", "post"): ["201", "400", "401", "403", "409"],
        ("/api/sweeps/{id}/cancel/", "post"): ["200", "400", "401", "403", "404", "409"],
        ("/api/sweeps/{id}/analysis/", "get"): ["200", "400", "401", "403", "404"],   # an unknown query key
        ("/api/sweeps/{id}/export/", "get"): ["200", "400", "401", "403", "404"],
        ("/api/runs/{id}/records/", "get"): ["200", "400", "401", "403", "404", "409"],
        ("/api/runs/{id}/export/", "get"): ["200", "400", "401", "403", "404"],
        ("/api/runs/{id}/original/", "get"): ["200", "400", "401", "403", "404"],
        ("/api/runs/import/", "post"): ["201", "400", "401", "403", "409"],
        ("/api/runs/compare/", "get"): ["200", "400", "401", "403"],  # ids that name no row are a 400
    }
    ref = "#/components/schemas/"
    for (path, method) in codes:
        for code in (401, 403):
            assert _body(schema, path, method, code) == {"$ref": ref + "Detail"}
    # a measured run's import_format is null, an imported one's a format: the enum lists both
    import_format = _resolve(schema, schema["components"]["schemas"]["Run"]["properties"]["import_format"])
    assert sorted(v for sub in import_format["oneOf"] for v in _resolve(schema, sub)["enum"]
                  if v is not None) == ["sglang-bench-serving", "vllm-bench-serve"]
    assert None in [v for sub in import_format["oneOf"] for v in _resolve(schema, sub)["enum"]]
    for path, method in (("/api/sweeps/", "post"), ("/api/sweeps/{id}/cancel/", "post"), ("/api/runs/import/", "post"),
                         ("/api/runs/compare/", "get")):
        assert _body(schema, path, method, 400) == {"$ref": ref + "ValidationError"}
    for path, method in (("/api/sweeps/", "post"), ("/api/sweeps/{id}/cancel/", "post")):
        assert _body(schema, path, method, 409) == {"$ref": ref + "Detail"}
    # an import's 409 names the runs holding the file's results; its 201 lists created and skipped
    assert _body(schema, "/api/runs/import/", "post", 409) == {"$ref": ref + "RunImportConflict"}
    assert _body(schema, "/api/runs/import/", "post", 201) == {"$ref": ref + "RunImportResult"}
    # exports: JSON of their own shape (not a Run) and CSV
    for path, component in (("/api/sweeps/{id}/export/", "SweepExport"), ("/api/runs/{id}/export/", "RunExport")):
        content = _operation(schema, path, "get")["responses"]["200"]["content"]
        assert content == {"application/json": {"schema": {"$ref": ref + component}},
                           "text/csv": {"schema": {"type": "string"}}}
    assert list(_operation(schema, "/api/runs/{id}/original/", "get")["responses"]["200"]["content"]) == [
        "application/octet-stream"]
    components = schema["components"]["schemas"]
    assert list(components["RunCompare"]["properties"]) == ["runs", "fields", "config_differs", "best", "ties",
                                                           "uncertain", "baseline", "baseline_note", "workload_note", "tie_threshold_pct",
                                                           "excluded",
                                                           "notes"]
    assert "ci95_ms" in components["RunCompareEntry"]["properties"]
    assert list(components["RunCompareWorkload"]["properties"]) == ["field", "label", "unit", "value",
                                                                    "baseline_value"]
    assert list(components["RunCi"]["properties"]) == ["ttft_ms", "tpot_ms", "e2e_ms"]
    assert list(components["RunCompareBest"]["properties"]) == [key for key, _ in BEST_METRICS]
    assert {key for key, _ in BEST_METRICS} == {key for key, _, _ in COMPARE_FIELDS} - {"failures"}
    assert components["RunCompareConfig"]["properties"]["roles"]["type"] == "object"
    assert list(components["RunRecordsPage"]["properties"]) == ["count", "offset", "limit", "rows"]
    assert list(components["SweepExport"]["properties"]) == ["sweep", "runs", "analysis"]
    assert _body(schema, "/api/sweeps/{id}/analysis/", "get", 200) == {"$ref": ref + "SweepAnalysis"}
    # the import answers the runs it created and those it skipped: no pagination parameters, no
    # paginated envelope
    imported = _operation(schema, "/api/runs/import/", "post")
    assert [p["name"] for p in imported.get("parameters", [])] == []
    assert list(components["RunImportResult"]["properties"]) == ["created", "skipped"]
    assert components["RunImportResult"]["properties"]["created"]["items"] == {"$ref": ref + "Run"}


def test_real_answers_match_the_documented_bodies(steady_sim: str, operator_api, viewer_api) -> None:
    schema = _schema(viewer_api)
    deployment = sim_deployment_create(base_url=steady_sim)
    created = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": GRID}, format="json")
    assert created.status_code == 201
    check(schema, created, "/api/sweeps/", "post")
    sweep_id = created.json()["id"]
    busy = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": GRID}, format="json")
    assert busy.status_code == 409
    check(schema, busy, "/api/sweeps/", "post")
    bad = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {**GRID, "concurrency": [0]},
                                             "extra": 2}, format="json")
    assert bad.json() == {"extra": ["unknown field 'extra'; allowed: deployment, grid, name"],
                          "grid.concurrency.0": ["must be an integer 1..4096, got 0"]}
    check(schema, bad, "/api/sweeps/", "post")

    assert sweep_execute(sweep_id=sweep_id) == SweepStatus.DONE
    [run] = BenchmarkRun.objects.filter(sweep_id=sweep_id)
    assert run.status == RunStatus.DONE and run.summary["successes"] == 4
    # Its timings are of tokens, not of network reads (else no best TTFT, TPOT or ITL is named below).
    assert "itl_coalesced" not in run.flags, run.summary["itl_zero_gap_fraction"]
    measured = viewer_api.get(f"/api/runs/{run.pk}/")
    check(schema, measured, "/api/runs/{id}/", "get")
    assert (measured.json()["import_format"], measured.json()["original_filename"]) == (None, None)

    records = viewer_api.get(f"/api/runs/{run.pk}/records/?offset=1&limit=2")
    check(schema, records, "/api/runs/{id}/records/", "get")
    page = records.json()
    assert (page["count"], page["offset"], page["limit"], len(page["rows"])) == (4, 1, 2, 2)
    assert all(r["ok"] and r["output_tokens"] == 16 and r["ttft_ms"] > 0 for r in page["rows"])
    check(schema, viewer_api.get(f"/api/runs/{run.pk}/records/?limit=0"), "/api/runs/{id}/records/", "get")
    check(schema, viewer_api.get("/api/runs/999999/records/"), "/api/runs/{id}/records/", "get")

    exported = viewer_api.get(f"/api/runs/{run.pk}/export/?format=json")
    check(schema, exported, "/api/runs/{id}/export/", "get")
    assert exported.json()["metrics"]["successes"] == 4
    as_csv = viewer_api.get(f"/api/runs/{run.pk}/export/?format=csv")
    assert as_csv.status_code == 200 and as_csv["Content-Type"] == "text/csv"
    assert [r["run_id"] for r in csv.DictReader(io.StringIO(as_csv.content.decode()))] == [str(run.pk)]
    check(schema, viewer_api.get(f"/api/runs/{run.pk}/export/?format=xml"), "/api/runs/{id}/export/", "get")

    sweep_json = viewer_api.get(f"/api/sweeps/{sweep_id}/export/?format=json")
    check(schema, sweep_json, "/api/sweeps/{id}/export/", "get")
    assert [r["id"] for r in sweep_json.json()["runs"]] == [run.pk]
    sweep_csv = viewer_api.get(f"/api/sweeps/{sweep_id}/export/?format=csv")
    assert sweep_csv.status_code == 200 and sweep_csv["Content-Type"] == "text/csv"
    analysis = viewer_api.get(f"/api/sweeps/{sweep_id}/analysis/")
    check(schema, analysis, "/api/sweeps/{id}/analysis/", "get")
    assert analysis.json()["provisional"] is False and list(analysis.json()["lengths"]) == ["32/16"]

    done = viewer_api.get(f"/api/sweeps/{sweep_id}/")
    assert done.json()["status"] == "done" and done.json()["current_tok_s"] is None
    check(schema, operator_api.post(f"/api/sweeps/{sweep_id}/cancel/"), "/api/sweeps/{id}/cancel/", "post")
    check(schema, operator_api.post("/api/sweeps/999999/cancel/"), "/api/sweeps/{id}/cancel/", "post")

    # A point cancelled in a later sweep of the same deployment: shown, never ranked.
    later = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": GRID}, format="json").json()
    operator_api.post(f"/api/sweeps/{later['id']}/cancel/")
    cancelled = BenchmarkRun.objects.create(sweep_id=later["id"], ordinal=0, status=RunStatus.CANCELLED,
                                            concurrency=1, input_len=32, output_len=16, progress={"done": 1})
    compared = viewer_api.get(f"/api/runs/compare/?ids={run.pk},{cancelled.pk}")
    check(schema, compared, "/api/runs/compare/", "get")
    body = compared.json()
    # every metric the run has (all but goodput: it had no SLO) names it
    assert body["best"] == {key: None if key == "goodput_req_s" else run.pk for key, _ in BEST_METRICS}
    assert body["runs"][0]["config"]["roles"] == deployment.spec_snapshot["roles"]
    check(schema, viewer_api.get(f"/api/runs/compare/?ids={run.pk}"), "/api/runs/compare/", "get")
    check(schema, viewer_api.get(f"/api/runs/compare/?ids={run.pk},999999"), "/api/runs/compare/", "get")


def test_401_and_403_answers_match_the_documented_bodies(anon_api, outsider_api, viewer_api) -> None:
    schema = _schema(viewer_api)
    answers = [
        (anon_api.get("/api/sweeps/"), "/api/sweeps/", "get", 401),
        (anon_api.post("/api/runs/import/", {"text": "{}"}, format="json"), "/api/runs/import/", "post", 401),
        (outsider_api.get("/api/runs/compare/?ids=1,2"), "/api/runs/compare/", "get", 403),
        (viewer_api.post("/api/sweeps/", {"deployment": 1, "grid": GRID}, format="json"), "/api/sweeps/", "post", 403),
        (viewer_api.post("/api/sweeps/1/cancel/"), "/api/sweeps/{id}/cancel/", "post", 403),
    ]
    for response, path, method, code in answers:
        assert response.status_code == code, (path, response.content)
        check(schema, response, path, method)
    assert answers[0][0].json() == {"detail": "Authentication credentials were not provided."}
    assert answers[3][0].json() == {"detail": "This needs the operator role; you are a viewer."}
