"""A sweep page watched live until the sweep is done shows its what-if link without a reload: the
page renders it hidden while the sweep runs, and the live progress reveals it on the final status.
A cancelled or failed sweep's link is not revealed by the script: such a sweep may have no point to
project, and the progress partial reloaded as it ends brings its link or the reason why not."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
NODE = shutil.which("node")

# dashboards.js in a bare sandbox: one live sweep panel, one hidden what-if link, and a CeilingLive
# whose open() keeps the message handler for the test to call.
HARNESS = r"""
const fs = require("fs"), vm = require("vm");
function el(attrs) {
  return {hidden: attrs.hidden, className: "", textContent: attrs.text || "", classList: {add() {}, remove() {}, toggle() {}},
          getAttribute(name) { return (attrs.attrs || {})[name] || null; }, querySelector() { return null; }};
}
const root = el({hidden: true, attrs: {"data-live-sweep": "7", "data-created": "0"}});
const link = el({hidden: true});
let handler = null;
const document = {readyState: "complete", addEventListener() {}, querySelector() { return null; },
                  querySelectorAll(sel) { return sel === "[data-live-sweep]" ? [root] : sel === "[data-whatif-link]" ? [link] : []; }};
const sandbox = {window: {}, document, setInterval() { return 0; }, Date, Math, JSON, isFinite, parseFloat,
                 CeilingLive: {open(o) { handler = o.onMessage; }, clockUtc() { return ""; }, notBefore() { return {}; }}};
vm.createContext(sandbox);
vm.runInContext(fs.readFileSync(process.argv[1] + "/static/ceiling/dashboards.js", "utf8"), sandbox);
const seen = [];
for (const status of ["running", "cancelled", "failed", "done"]) {
  handler({type: "sweep.status", data: {status}}, {replayed: false});
  seen.push([status, link.hidden]);
}
process.stdout.write(JSON.stringify(seen));
"""


def test_the_live_progress_reveals_the_what_if_link_when_the_sweep_is_done() -> None:
    assert NODE, "Node.js is needed: make setup installs the page scripts with npm, which runs on it"
    done = subprocess.run([NODE, "-e", HARNESS, str(REPO)], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [["running", True], ["cancelled", True], ["failed", True], ["done", False]]
