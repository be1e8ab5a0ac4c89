"""An imported run's page holds no headings over empty charts: its file held only aggregate
figures, so one line in place of the distributions and the throughput over time says so and
names the figures the summary shows. A real SGLang bench_serving result is imported through the
import form."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from benchmarks.models import BenchmarkRun

DATA = Path(__file__).parent / "data"


@pytest.mark.django_db
def test_an_imported_sglang_run_says_it_held_only_aggregate_figures(client, operator, viewer, settings,
                                                                    tmp_path) -> None:
    settings.VAR_DIR = tmp_path
    original = (DATA / "sglang-bench-serving-h200.jsonl").read_bytes()
    client.force_login(operator)
    response = client.post(reverse("benchmarks:run-import"),
                           {"file": SimpleUploadedFile("sglang-bench-serving-h200.jsonl", original)})
    assert response.status_code == 302
    run = BenchmarkRun.objects.get()
    assert run.source == "imported" and not run.records_path
    client.force_login(viewer)
    html = client.get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    assert "Distributions" not in html and "Throughput over time" not in html
    assert 'id="chart-cdf-ttft"' not in html and 'id="chart-timeline"' not in html
    assert "no per-request records (imported" not in html
    [line] = re.findall(r'<p class="muted no-records">([^<]*)</p>', html)
    assert line == ("The imported file held only aggregate figures, not per-request records: output throughput, "
                    "request throughput, TTFT p50, ITL p50 and E2E mean/p50 (ms), shown in the summary above. "
                    "No distributions or throughput over time can be drawn from it.")
    # the figures it names are the file's, and the summary shows them
    line_json = json.loads(original)
    assert f"{line_json['output_throughput']:,.1f}" in html


@pytest.mark.django_db
def test_a_measured_run_with_records_keeps_its_distributions(client, viewer) -> None:
    run = BenchmarkRun.objects.create(status="done", concurrency=1, input_len=8, output_len=8,
                                      summary={"successes": 1, "output_throughput_tok_s": 1.0})
    client.force_login(viewer)
    html = client.get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    assert "no-records" not in html and "Distributions" in html
