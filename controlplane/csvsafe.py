"""CSV exports that a spreadsheet opens as data, never as formulas.

A spreadsheet (Excel, LibreOffice Calc, Google Sheets) reads a cell starting with ``=``, ``+``,
``-`` or ``@``, and in some versions one starting with a tab or a carriage return, as a formula:
a stored text such as an engine's error message ``=HYPERLINK("http://…"&A1,"click")`` would then
run when the export is opened. Following OWASP's "CSV Injection" guidance, such a text cell is
written with a single quote in front (``'=HYPERLINK(…)``), which spreadsheets show as the text
itself. Numbers (``int``, ``float``; a negative number included) are written as numbers, a
negative zero as ``0.0`` (``-0.0`` would read as a change below zero).
"""
from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# First characters that make a spreadsheet read a text cell as a formula (OWASP, "CSV Injection").
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """``value`` as a CSV cell: ``""`` for None, ``true`` / ``false`` for booleans (as JSON writes
    them, not Python's ``True``), numbers unchanged but a negative zero written as ``0.0``, any
    other value as text, with ``'`` in front when it starts with one of :data:`FORMULA_START`."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value == 0:
        return 0.0   # -0.0 too
    if isinstance(value, (int, float)):
        return value
    text = str(value)
    return "'" + text if text.startswith(FORMULA_START) else text


def csv_text(rows: Iterable[Mapping[str, Any]], fieldnames: Sequence[str]) -> str:
    """``rows`` as CSV text: a header of ``fieldnames``, then one line per row (a field a row
    lacks is an empty cell), every cell through :func:`csv_cell`; ``\\n`` line ends."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([csv_cell(name) for name in fieldnames])
    for row in rows:
        writer.writerow([csv_cell(row.get(name)) for name in fieldnames])
    return buf.getvalue()
