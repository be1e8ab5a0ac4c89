"""``manage.py sweep``'s results table stays narrow and aligned on an 80-120 column terminal: units
sit in a second header line, and a long cell (a cancelled point's ``4 sent of 10 planned``,
``0 (+2 aborted)``, flag names) keeps its leading count and a numbered reference, its text going
below the table as a note.

Against a real ``sim`` engine process (``sim_url``); the sweep runs in the command (``--here``)
while a thread of the test cancels it partway through its second point."""
from __future__ import annotations

import csv
import io
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from benchmarks.analysis import PARTIAL_FLAG
from benchmarks.models import BenchmarkSweep
from benchmarks.services import sweep_cancel
from benchmarks.sweeps import CELL_MAX, REPORT_WIDTH, TABLE_HEADERS, results_table_lines
from benchmarks.tests.sweep_support import sim_deployment_create

HEADER_UNITS = [unit for _, unit in TABLE_HEADERS]


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


def _edges(header: str) -> list[int]:
    """The right edge (one past the last character) of each column of the units header line."""
    edges, cursor = [], 0
    for unit in HEADER_UNITS:
        at = header.index(unit, cursor)
        cursor = at + len(unit)
        edges.append(cursor)
    return edges


def _table(lines: list[str]) -> tuple[int, list[str]]:
    """The index of the units header line and the table's rows below it (up to the first note)."""
    [at] = [i for i, line in enumerate(lines) if line.split()[:3] == ["c", "requests", "tok/s"]]
    rows = []
    for line in lines[at + 1:]:
        if not line.strip() or line.lstrip().startswith("[") or not line.lstrip()[0].isdigit():
            break
        rows.append(line)
    return at, rows


def _cells(row: str, edges: list[int]) -> list[str]:
    starts = [0, *edges[:-1]]
    return [row[a:b].strip() for a, b in zip(starts[:-1], edges[:-1], strict=True)] + [row[edges[-2]:].strip()]


def _assert_aligned(header: str, rows: list[str]) -> None:
    edges = _edges(header)
    for row in rows:
        for edge in edges[:-1]:   # every right-aligned column ends where its header does
            assert row[edge - 1] != " " and row[edge:edge + 2] == "  ", (row, edge)
        assert row[edges[-2] + 2] != " ", row   # the flags column starts where its header does


def _notes(lines: list[str]) -> dict[str, str]:
    """``{"[1]": "requests: 4 sent of 10 planned", ...}`` from the notes below the table,
    their wrapped lines joined."""
    notes: dict[str, str] = {}
    ref = None
    for line in lines:
        m = re.match(r"\s*(\[\d+\]) (.*)", line)
        if m:
            ref = m.group(1)
            notes[ref] = m.group(2)
        elif ref and line.startswith("  " + " " * 4) and not line.lstrip().startswith("-"):
            notes[ref] += " " + line.strip()
        else:
            ref = None
    return notes


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.django_db(transaction=True)
def test_a_cancelled_points_long_cells_go_below_the_table_as_numbered_notes(sim_url: str, operator, operator_api,
                                                                                        client) -> None:
    sim_deployment_create(base_url=sim_url, recipe_name="table-sim")

    def cancel_once_point_two_has_two_done() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            sweep = BenchmarkSweep.objects.first()
            run = sweep.runs.filter(ordinal=1).first() if sweep else None
            if run is not None and int((run.progress or {}).get("done") or 0) >= 2:
                sweep_cancel(sweep=sweep, user=operator)
                return
            time.sleep(0.05)

    canceller = threading.Thread(target=cancel_once_point_two_has_two_done)
    canceller.start()
    out = io.StringIO()
    with pytest.raises(CommandError) as exc:
        call_command("sweep", "table-sim", "--concurrency", "1,2", "--lengths", "16:256",
                     "--requests-per-concurrency", "5", "--here", stdout=out)
    canceller.join(10)
    sweep = BenchmarkSweep.objects.get()
    assert exc.value.returncode == 1 and sweep.status == "cancelled"
    cut = sweep.runs.get(ordinal=1)
    s = cut.summary
    assert s["partial"]["completed"] >= 2 and s["aborted"] >= 1   # a cut point with requests ended in flight

    lines = out.getvalue().splitlines()
    assert all(len(line) <= REPORT_WIDTH for line in lines), [line for line in lines if len(line) > REPORT_WIDTH]
    at, rows = _table(lines)
    header = lines[at]
    assert lines[at - 1].split() == ["out", "tok/s", "TTFT", "TTFT", "TPOT", "ITL", "E2E"]
    assert header.split() == ["c", "requests", "tok/s", "/GPU", "p50", "ms", "p99", "ms", "mean", "ms", "p99",
                              "ms", "p50", "s", "failed", "flags"]
    assert len(rows) == 2 and all(len(row) <= 88 for row in lines[at - 1:at + 3])
    _assert_aligned(header, rows)
    cells = _cells(rows[1], _edges(header))
    assert all(len(cell) <= CELL_MAX for cell in cells), cells
    notes = _notes(lines)

    # The cut point's requests are what it sent, the aborted ones included, as the page, the API and
    # the CSV count them; the rest of the text is its note.
    sent = s["successes"] + s["aborted"]
    assert s["requests"] == sent < 10
    count, ref = cells[1].split()
    assert count == str(sent)
    assert notes[ref] == f"requests: {sent} sent of 10 planned"
    client.force_login(operator)
    page = client.get(reverse("benchmarks:sweep-results", args=[sweep.pk])).content.decode()
    assert f'<td class="num">{sent} sent of 10 planned</td>' in page
    assert operator_api.get(f"/api/runs/{cut.pk}/").json()["metrics"]["requests"] == sent
    (exported,) = [r for r in csv.DictReader(io.StringIO(client.get(
        reverse("benchmarks:sweep-export", args=[sweep.pk, "csv"])).content.decode())) if r["run_id"] == str(cut.pk)]
    assert (exported["requests"], exported["num_requests"]) == (str(sent), "10")
    count, ref = cells[9].split()
    assert (count, notes[ref]) == ("0", f"failures: 0 (+{s['aborted']} aborted)")
    assert notes[cells[10]] == "flags: " + ", ".join(cut.flags) and PARTIAL_FLAG in notes[cells[10]]
    # The notes follow the table, in the order of their numbers.
    assert list(notes) == [f"[{n}]" for n in range(1, len(notes) + 1)]
    assert min(i for i, line in enumerate(lines) if line.lstrip().startswith("[1] ")) > at + len(rows)
    assert lines[0] == f"sweep #{sweep.pk} created: 2 points, 15 requests"
    assert any(line.startswith("  reason: ") for line in lines)


def _run(concurrency, rate, summary, flags=(), status="done", lengths=(256, 256)):
    return SimpleNamespace(concurrency=concurrency, request_rate=rate, num_requests=10, summary=summary,
                           flags=list(flags), progress={}, input_len=lengths[0], output_len=lengths[1],
                           status=status)


def test_a_sweep_of_two_length_pairs_says_each_rows_lengths() -> None:
    done = {"requests": 2, "successes": 2, "failures": 0, "output_throughput_tok_s": 50.0}
    runs = [_run(1, None, done, lengths=(32, 32)), _run(4, None, done, lengths=(32, 32)),
            _run(1, None, done, lengths=(64, 32)), _run(4, None, done, lengths=(64, 32))]
    lines = results_table_lines(runs, num_gpus=1)
    assert lines[0].split()[0] == "in/out" and lines[1].split()[:3] == ["c", "tokens", "requests"]
    assert [line.split()[:3] for line in lines[2:6]] == [["1", "32/32", "2"], ["4", "32/32", "2"],
                                                         ["1", "64/32", "2"], ["4", "64/32", "2"]]
    # one pair: no lengths column (the heading says the pair)
    one = results_table_lines(runs[:2], num_gpus=1)
    assert "in/out" not in one[0] and one[1].split()[:2] == ["c", "requests"]


def test_a_time_limited_partial_point_and_a_failed_one_keep_the_table_narrow() -> None:
    partial = {"requests": 22, "successes": 20, "failures": 0, "aborted": 2, "duration_s": 3.2149,
               "output_throughput_tok_s": 1234.56, "ttft_s": {"p50": 0.1234, "p99": 1.5},
               "tpot_s": {"mean": 0.094}, "itl_s": {"p99": 0.51}, "e2e_s": {"p50": 24.5},
               "partial": {"completed": 20, "planned_duration_s": 8, "reason": "the sweep was cancelled"},
               "ended_by": "cancelled"}
    runs = [_run(None, 2.5, {"requests": 10, "successes": 10, "failures": 0, "output_throughput_tok_s": 99.5}),
            _run(None, 16.0, partial, flags=[PARTIAL_FLAG, "itl_coalesced"]),
            _run(None, 32.0, {}, flags=["no_successful_requests"], status="failed")]
    lines = results_table_lines(runs, num_gpus=4)
    table = lines[:5]
    # the widest cells a 4-GPU sweep prints, each column no wider than its header or CELL_MAX
    assert all(len(line) <= 88 for line in table), table
    assert table[1].split()[0] == "load" and table[2].split()[0] == "2.5/s"
    assert table[4].split()[:2] == ["32/s", "!"]
    _assert_aligned(table[1].replace("load", "   c"), table[2:])
    cells = _cells(table[3], _edges(table[1].replace("load", "   c")))
    assert cells[1] == "20 [1]" and cells[9] == "0 [2]" and cells[10] == "[3]"
    assert lines[5].startswith("! not kept as a measurement")
    notes = _notes(lines[6:])
    assert notes == {"[1]": "requests: 20 requests completed in 3.21 s of the planned 8 s, cancelled",
                     "[2]": "failures: 0 (+2 aborted)",
                     "[3]": f"flags: {PARTIAL_FLAG}, itl_coalesced",
                     "[4]": "flags: no_successful_requests"}
