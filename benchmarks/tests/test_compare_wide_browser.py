"""The compare page of four runs fits a 1280 px window in a real browser (the Debian chromium
package through Playwright): each run's roles read one line per role and wrap in their cell
rather than as one long JSON line that made the table wider than the screen."""
from __future__ import annotations

import pytest

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from controlplane.tests.browser.conftest import browser, sign_in  # noqa: F401 - the fixture
from deployments.examples import SEED_ENV

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(120)]

PD_ROLES = {
    "prefill": {"gpus": [0, 1, 2, 3], "tp": 4, "numa_node": 0, "port": 30000, "bootstrap_port": 8998},
    "decode": {"gpus": [4, 5, 6, 7], "tp": 4, "numa_node": 1, "port": 30001},
    "router": {"host": "0.0.0.0", "port": 30080, "flags": {"prometheus-port": 29000}},
}
SINGLE_ROLES = {"single": {"gpus": [0, 1, 2, 3], "tp": 4, "numa_node": 0, "host": "0.0.0.0", "port": 30000}}

MEASURE = """() => { const box = document.querySelector('table.compare').closest('.table-scroll');
  const roles = Array.from(document.querySelectorAll('table.compare tr.config'))
    .find(r => r.cells[0].innerText.startsWith('roles'));
  return {box: box.clientWidth, table: box.scrollWidth, page: document.documentElement.scrollWidth,
          window: window.innerWidth, roles: Array.from(roles.cells).slice(1).map(c => c.innerText)}; }"""


def _run(sweep: BenchmarkSweep, ordinal: int, *, pd: bool) -> BenchmarkRun:
    summary = {"requests": 256, "successes": 256, "failures": 0, "duration_s": 61.5,
               "output_throughput_tok_s": 2400.0 + 10 * ordinal, "tok_s_per_gpu": 300.0 + ordinal,
               "request_throughput_req_s": 4.16, "goodput_req_s": 4.0, "slo": {"ttft_s": 2.0, "tpot_s": 0.1},
               **{f"{m}_s": {"mean": 1.25, "p50": 1.2, "p90": 2.4, "p99": 3.6} for m in ("ttft", "tpot", "itl", "e2e")}}
    snapshot = {"engine": "sglang", "topology": "pd" if pd else "single", "recipe": "seed-v4-flash-pd",
                "spec": {"roles": PD_ROLES if pd else SINGLE_ROLES, "env": dict(SEED_ENV)}}
    return BenchmarkRun.objects.create(sweep=sweep, ordinal=ordinal, status=RunStatus.DONE, concurrency=64,
                                       input_len=1024, output_len=256, num_gpus=8, summary=summary,
                                       snapshot=snapshot, served_model_name="deepseek-ai/DeepSeek-V4-Flash")


@pytest.fixture
def ids(db) -> str:
    """Four runs, PD and single by turns, made before the browser starts (Playwright's sync API
    runs an event loop in this thread, where Django refuses database calls)."""
    sweep = BenchmarkSweep.objects.create(name="pd vs single", status=SweepStatus.DONE)
    return ",".join(str(_run(sweep, i, pd=i % 2 == 0).pk) for i in range(4))


@pytest.mark.django_db(transaction=True)
def test_four_runs_with_their_roles_fit_a_1280_px_window(live_server, ids, admin_user,
                                                         browser) -> None:  # noqa: F811
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    sign_in(page, live_server.url, admin_user)
    page.goto(f"{live_server.url}/benchmarks/compare/?runs={ids}")
    page.wait_for_selector("table.compare")
    seen = page.evaluate(MEASURE)
    context.close()
    assert seen["table"] <= seen["box"] and seen["page"] <= seen["window"], seen
    # one line per role, every setting kept
    assert seen["roles"][0].splitlines() == [
        "decode: gpus=[4,5,6,7] numa_node=1 port=30001 tp=4",
        "prefill: bootstrap_port=8998 gpus=[0,1,2,3] numa_node=0 port=30000 tp=4",
        'router: flags={"prometheus-port":29000} host=0.0.0.0 port=30080'], seen
    assert seen["roles"][1] == "single: gpus=[0,1,2,3] host=0.0.0.0 numa_node=0 port=30000 tp=4", seen
