"""What the engine servers report about their capacity is kept on the deployment as it becomes
ready (by the node agent's own monitor pass, against real sim engine processes and, for PD, the
real sglang-router), shown on the deployment page and API, and preferred by sweep creation's rule
over what the recipe's sim profile states."""
from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from benchmarks.models import BenchmarkSweep
from benchmarks.sweeps import grid_context_problems
from benchmarks.tests.page_support import logged_in_client
from benchmarks.tests.sweep_support import agent_watched_deployment, sim_deployment_create
from deployments import services as deployment_services
from deployments.engine_limits import deployment_limits_read
from deployments.tests.factories import cpu_node_create
from deployments.tests.test_agent_support import free_ports, sim_pd_recipe

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180), pytest.mark.django_db(transaction=True)]

SEED = "seed-sm120-fallback"
READ_AT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@pytest.fixture
def engines(settings, tmp_path: Path):
    settings.CEILING_LOG_DIR = tmp_path / "engines"
    settings.VAR_DIR = tmp_path
    return tmp_path


def _single_recipe(operator, name: str):
    (port,) = free_ports(1)
    spec = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
            "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": port, "flags": {"time-scale": 0.05}}},
            "sim": {"profile": SEED}, "startup_timeout_s": 30, "stop_grace_s": 5}
    return deployment_services.recipe_create(user=operator, name=name, engine="sim", topology="single",
                                             node=cpu_node_create(name=f"{name}-box"), spec=spec), port


def _when(read_at: str) -> str:
    return read_at.replace("T", " ").replace("Z", " UTC")


def test_a_single_server_reports_its_kv_pool_once_ready_and_the_rule_prefers_it(engines, operator, operator_api):
    recipe, port = _single_recipe(operator, "sim-seed-single")
    with agent_watched_deployment(recipe=recipe, user=operator, tmp_path=engines, tick_s=0.2,
                                  what="the sim single deployment") as deployment:
        limits = deployment.engine_limits
        assert READ_AT.match(limits["read_at"]) and limits["topology"] == "single" and limits["error"] is None
        assert limits["servers"] == {"single0": {
            "base_url": f"http://127.0.0.1:{port}", "read_from": [f"http://127.0.0.1:{port}/get_server_info"],
            "max_total_num_tokens": 5376, "context_length": 65536, "max_running_requests": 32,
            "chunked_prefill_size": 1024, "admission_reserve_tokens": 16, "error": None}}

        # Read-only in the API, as stored.
        body = operator_api.get(f"/api/deployments/{deployment.pk}/").json()
        assert body["engine_limits"] == limits
        page = logged_in_client(operator).get(reverse("deployments:deployment-detail", args=[deployment.pk]))
        html = page.content.decode()
        assert "Engine-reported limits" in html and f"read {_when(limits['read_at'])}" in html
        row = html.split("engine-limits-table")[1].split("</tbody>")[0]
        assert re.findall(r'<td class="num">(\d+)</td>', row) == ["5376", "65536", "32", "1024"]

        # The recorded recipe now claims the demo profile (KV 32,768, context 8,192): the engine's own
        # report wins, so 6000:4 is refused against the 5,376 tokens it serves.
        deployment.spec_snapshot = {**deployment.spec_snapshot, "sim": {"profile": "demo-fast"}}
        deployment.save(update_fields=["spec_snapshot"])
        source = (f"reported by the single server's /get_server_info at {_when(limits['read_at'])}: "
                  f"max_total_num_tokens 5376")
        expected = (f"6000:4 needs 6,016 tokens of KV cache for one request alone (6000 in + the 16 tokens "
                    f"reserved on admission, more than its 4 out), more than the deployment's 5,376 ({source}): "
                    f"the engine would refuse every request, even at concurrency 1; use shorter lengths or "
                    f"deploy with a larger KV cache")
        refused = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {
            "concurrency": [1], "lengths": ["6000:4"], "requests": 1}}, format="json")
        assert refused.status_code == 400 and refused.json() == {"grid.lengths.0": [expected]}
        with pytest.raises(CommandError) as exc:
            call_command("sweep", recipe.name, "--concurrency", "1", "--lengths", "6000:4", "--requests", "1",
                         "--user", operator.username, stdout=io.StringIO())
        assert str(exc.value).split("\n") == ["the sweep grid is refused:", f"  --lengths (grid.lengths.0): {expected}"]
        form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {
            "deployment": deployment.pk, "concurrency": "1", "lengths": "6000:4", "requests": "1"})
        assert form.status_code == 400 and expected.replace("'", "&#x27;") in form.content.decode()
        # Above the profile's context (8,192) but within the reported 65,536 and 5,376: no refusal.
        # Four such requests do not fit together (4 x 5,376): queued by the engine, so accepted.
        assert grid_context_problems({"lengths": [[5000, 300], [5360, 16]]}, spec=deployment.spec_snapshot,
                                     engine="sim", reported=limits) == {}
        assert not BenchmarkSweep.objects.exists()


def test_pd_reads_the_decode_servers_kv_pool_and_the_prefill_servers_chunk(engines, operator, operator_api):
    recipe = sim_pd_recipe(node=cpu_node_create(name="pd-box"), user=operator, name="sim-seed-pd")
    recipe = deployment_services.recipe_update(recipe=recipe, user=operator,
                                               spec={**recipe.spec, "sim": {"profile": SEED}})
    ports = {r: recipe.spec["roles"][r]["port"] for r in ("prefill", "decode")}
    with agent_watched_deployment(recipe=recipe, user=operator, tmp_path=engines, tick_s=0.2,
                                  what="the sim PD deployment") as deployment:
        limits = deployment.engine_limits
        assert limits["topology"] == "pd" and sorted(limits["servers"]) == ["decode0", "prefill0"]
        for role in ("prefill", "decode"):
            server = limits["servers"][f"{role}0"]
            assert server["read_from"] == [f"http://127.0.0.1:{ports[role]}/get_server_info"]
            assert (server["max_total_num_tokens"], server["context_length"], server["max_running_requests"],
                    server["chunked_prefill_size"]) == (5376, 65536, 32, 1024)
        when = _when(limits["read_at"])
        refused = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {
            "concurrency": [1], "lengths": ["2048:16", "1000:5000"], "requests": 1}}, format="json")
        assert refused.status_code == 400
        assert refused.json() == {
            "grid.lengths.0": [
                f"2048:16 has a 2,048-token prompt, more than the prefill server takes (1,024 tokens, reported by "
                f"the prefill server's /get_server_info at {when}: chunked_prefill_size 1024): the engine would "
                f"refuse every request; use a shorter input length"],
            "grid.lengths.1": [
                f"1000:5000 needs 6,000 tokens of KV cache for one request alone (1000 in + 5000 out), more than "
                f"the deployment's 5,376 (reported by the decode server's /get_server_info at {when}: "
                f"max_total_num_tokens 5376): the engine would refuse every request, even at concurrency 1; use "
                f"shorter lengths or deploy with a larger KV cache"]}


def test_a_server_that_answers_nothing_is_recorded_null_with_why(operator):
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    record = deployment_limits_read(deployment)
    server = record["servers"]["single0"]
    assert server["read_from"] == [] and server["max_total_num_tokens"] is None
    assert server["error"].startswith("/get_server_info: ConnectError")
    assert record["error"] == f"no server reported its limits: single0: {server['error']}"
    # Nothing reported: the sim profile's own rule stands (demo-fast: context 8,192).
    assert list(grid_context_problems({"lengths": [[8000, 400]]}, spec=deployment.spec_snapshot, engine="sim",
                                      reported=record)) == ["grid.lengths.0"]
