"""Server-rendered pages of the benchmarks app: the index (sweeps, recent runs, import form),
the sweep form, one sweep (live progress polled by htmx, results table, charts, ceiling findings,
snapshot, export, cancel), one run (summary table, CDFs and a tok/s timeline from the raw
per-request records, flags, failures, snapshot, the imported original file) and the comparison
of any runs or sweeps side by side.

Views are thin: they authorise (:func:`deployments.views.role_page`), parse the request, call
one function of :mod:`benchmarks.services` and shape numbers for the templates. The package:
:mod:`.common` (shared numbers and helpers), :mod:`.charts` (chart data), :mod:`.sweep_pages`
(index, import, sweep form and sweep pages), :mod:`.run_pages` (run pages and the comparison).
Units: summaries store seconds (``ttft_s``); pages show latencies in ms and throughputs per
second, with the unit in every column header. A value that was not measured is ``None`` and
renders as "—", never 0.

Chart data is built as plain dicts (the format :file:`static/ceiling/charts.js` documents) and
embedded with ``json_script``.
"""
from benchmarks.views.charts import (
    cdf_axis_cap, cdf_chart, cdf_points, chart_spec, record_arrays, run_charts, sweep_charts, timeline_points,
)
from benchmarks.views.common import FLAG_TEXT, run_row
from benchmarks.views.run_pages import compare, compare_context, run_detail, run_export, run_list, run_original
from benchmarks.views.sweep_pages import (
    benchmark_index, run_import_view, run_progress, sweep_cancel_view, sweep_create_view, sweep_detail,
    sweep_export, sweep_grid_from_form, sweep_list, sweep_progress, sweep_progress_partial, sweep_results_partial,
)

__all__ = [
    "FLAG_TEXT", "benchmark_index", "cdf_axis_cap", "cdf_chart", "cdf_points", "chart_spec", "compare",
    "compare_context", "record_arrays", "run_charts", "run_detail", "run_export", "run_list", "run_import_view", "run_original",
    "run_progress", "run_row", "sweep_cancel_view", "sweep_charts", "sweep_create_view", "sweep_detail",
    "sweep_export", "sweep_grid_from_form", "sweep_list", "sweep_progress", "sweep_progress_partial", "sweep_results_partial",
    "timeline_points",
]
