"""A refused import, in a real browser (the Debian chromium package through Playwright): the page
that comes back shows the problems at the top of the import form and the browser focuses them, so
they are on screen although the run list above the form is long; the checkbox keeps the user's
choice and the refused file is named, to be chosen again. A file imported before is refused in
the form's words, naming its checkbox and the file's SHA-256 in full, never the API's field."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from benchmarks.choices import RunStatus
from benchmarks.models import BenchmarkRun
from controlplane.tests.browser.conftest import browser, in_thread, sign_in  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

DATA = Path(__file__).parent / "data"
VLLM = (DATA / "vllm-bench-serve.json").read_bytes()
# The real result with its duration made negative: refused at file.duration.
BAD = json.dumps({**json.loads(VLLM), "duration": -1.0}).encode()

# Where the problems are when the page has loaded: focused, and inside the window.
SEEN = """() => { const box = document.getElementById('import-errors');
  const r = box.getBoundingClientRect();
  return {focused: document.activeElement === box, top: r.top, bottom: r.bottom, window: window.innerHeight,
          scrolled: window.scrollY, text: box.innerText,
          ticked: document.getElementById('id_allow_duplicate').checked,
          first: box.parentElement.firstElementChild.nextElementSibling === box}; }"""


@pytest.fixture
def runs(db) -> int:
    """Forty measured runs, so that the run list pushes the import form far below the window;
    made before the browser starts (Playwright's sync API runs an event loop in this thread,
    where Django refuses database calls)."""
    for i in range(40):
        BenchmarkRun.objects.create(status=RunStatus.DONE, concurrency=i + 1, input_len=256, output_len=256,
                                    summary={"successes": 8, "failures": 0, "output_throughput_tok_s": 100.0 + i})
    return 40


def _import(page, base: str, name: str, body: bytes, *, tick: bool = False) -> None:
    page.goto(f"{base}/benchmarks/", wait_until="load")
    page.set_input_files("#id_file", files=[{"name": name, "mimeType": "application/json", "buffer": body}])
    if tick:
        page.check("#id_allow_duplicate")
    with page.expect_navigation(wait_until="load"):
        page.click("form.import-form button[type=submit]")


@pytest.mark.django_db(transaction=True)
def test_a_refused_import_shows_its_problems_where_the_form_is(live_server, runs, operator,
                                                               browser) -> None:  # noqa: F811
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    sign_in(page, live_server.url, operator)

    # A malformed file, with the checkbox ticked: the problem on screen, the tick kept.
    _import(page, live_server.url, "bad-run.json", BAD, tick=True)
    seen = page.evaluate(SEEN)
    assert seen["focused"] and seen["first"], seen        # the form's first element after its token
    assert seen["scrolled"] > 0 and 0 <= seen["top"] < seen["bottom"] <= seen["window"], seen
    assert seen["text"].startswith("bad-run.json was not imported (choose the file again below to retry"), seen
    assert "file.duration: expected a duration in seconds > 0, got -1" in seen["text"], seen
    assert seen["ticked"], seen
    assert in_thread(lambda: BenchmarkRun.objects.count()) == runs

    # Imported once, then refused as the same file: the checkbox by its label and the SHA-256.
    page.goto(f"{live_server.url}/benchmarks/", wait_until="load")
    _import(page, live_server.url, "vllm.json", VLLM)
    assert "/benchmarks/runs/" in page.url
    held = in_thread(lambda: BenchmarkRun.objects.latest("id").pk)
    _import(page, live_server.url, "vllm-again.json", VLLM)
    seen = page.evaluate(SEEN)
    context.close()
    assert seen["focused"] and 0 <= seen["top"] < seen["bottom"] <= seen["window"], seen
    assert not seen["ticked"], seen
    digest = hashlib.sha256(VLLM).hexdigest()
    assert (f"This file was already imported as run #{held} (vllm.json) on ") in seen["text"], seen
    assert (f"(same content, SHA-256 {digest}); tick “Import again runs that were imported before” below and "
            "import the file again to keep a second copy.") in seen["text"], seen
    assert f"Already imported as run #{held}." in seen["text"], seen
    assert "allow_duplicate" not in seen["text"], seen
    assert in_thread(lambda: BenchmarkRun.objects.count()) == runs + 1
