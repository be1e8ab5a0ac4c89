"""The node page of a host where NVML is not available, in a real browser (the Debian
``chromium`` package driven by Playwright) against Django's live test server: NVML's reason is
on the GPUs line only. The GPU section's empty line and the live NVML notice, drawn by the page's
own renderer from a node sample, refer to that line; a different reason read live is said in full.

No agent or websocket server: the sample is handed to the renderer directly.
"""
from __future__ import annotations

import json

import pytest

from deployments.discovery import GPU_COUNT_FROM_SYSFS_PCI
from deployments.nodes import node_register
from deployments.tests.factories import GIB
from deployments.topology import NodeFacts, NumaFacts

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

PASSWORD = "correct-horse-battery"  # the personas' password (conftest.py)
REASON = "NVML Shared Library Not Found"


@pytest.fixture
def cpu_only(transactional_db) -> str:
    node_register(facts=NodeFacts(
        name="cpuonly", hostname="cpuonly", cpu_count=2, memory_total_bytes=4 * GIB,
        numa_nodes=[NumaFacts(index=0, cpus=(0, 1), memory_total_bytes=4 * GIB)], nvml_status=REASON,
        pci_gpu_count=0, gpu_count_source=GPU_COUNT_FROM_SYSFS_PCI))
    return "cpuonly"


def _sample(nvml: str) -> dict:
    return {"node": "cpuonly", "t": 0, "interval_s": 0.5, "gpus": [], "nvml": nvml,
            "host": {"cpu_pct": 12.0, "cpu_pct_per_numa": {"0": 12.0},
                     "memory": {"total_bytes": 4 * GIB, "used_bytes": GIB}}}


def test_the_node_page_gives_nvmls_reason_once(live_server, cpu_only, viewer, browser):
    base = live_server.url
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{base}/login/?next=/nodes/{cpu_only}/", wait_until="domcontentloaded")
    page.fill("#id_username", viewer.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/nodes/{cpu_only}/", wait_until="load")

    render = """nvml => { const root = document.getElementById("node-live");
        window.CeilingDashboards.renderNode(root, Object.assign(%s, {t: Date.now() / 1000, nvml: nvml}), false); }"""
    page.evaluate(render % json.dumps(_sample(REASON)), REASON)
    notice = page.locator('#node-live [data-f="nvml"]')
    assert notice.is_visible()
    assert notice.inner_text() == "NVML unavailable: the GPUs line above says why"
    assert page.locator("#gpu-status").inner_text() == (
        f"0 GPUs (no NVIDIA PCI device; NVML not available: {REASON})")
    assert page.locator("[data-gpu-empty]").inner_text() == (
        "No usable GPU: NVML is not available (the GPUs line above says why). "
        "CPU-only engines such as llama.cpp and sim still run here.")
    assert page.locator("body").inner_text().count(REASON) == 1

    # A reason the page does not show yet (read live, after discovery) is said in full.
    page.evaluate(render % json.dumps(_sample("Driver Not Loaded")), "Driver Not Loaded")
    assert notice.inner_text() == "NVML unavailable: Driver Not Loaded"
    page.evaluate(render % json.dumps(_sample("ok")), "ok")
    assert not notice.is_visible()
    context.close()
    assert errors == [], errors
