"""``/api/runs/compare/?format=api``: the comparison on the browsable page, as every endpoint offers
it, beside the JSON and the CSV download."""
import pytest

from benchmarks.models import BenchmarkRun

SUMMARY = {"requests": 4, "successes": 4, "failures": 0, "output_throughput_tok_s": 100.0}


@pytest.fixture
def pair(db):
    return [BenchmarkRun.objects.create(source="imported", status="done", concurrency=c, input_len=8, output_len=8,
                                        summary=SUMMARY, original_text="{}", original_filename="b.json")
            for c in (1, 2)]


def test_the_comparison_is_offered_on_the_browsable_page(viewer_api, pair):
    a, b = pair
    page = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk}&format=api", HTTP_ACCEPT="text/html")
    assert page.status_code == 200 and page["Content-Type"].startswith("text/html")
    body = page.content.decode()
    assert "&quot;baseline&quot;: " + str(a.pk) in body
    as_json = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk}&format=json")
    assert as_json.status_code == 200 and as_json.json()["baseline"] == a.pk
    assert viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk}&format=csv")["Content-Type"] == "text/csv"
    # the browsable page still says what is wrong with the query
    bad = viewer_api.get("/api/runs/compare/?ids=x&format=api", HTTP_ACCEPT="text/html")
    assert bad.status_code == 400 and "must be comma-separated integer ids" in bad.content.decode()
