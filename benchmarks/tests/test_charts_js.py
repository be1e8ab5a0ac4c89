"""The chart script's axis rules, run by Node.js on the real ``static/ceiling/charts.js`` and the
real uPlot from ``node_modules`` (what the browser loads): flat and near-flat series never get
repeated tick labels, a capped CDF axis ends where the page said, and a one-point series is
marked instead of drawn as an invisible line."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NODE = shutil.which("node")



@pytest.fixture(autouse=True)
def _node() -> None:
    assert NODE, "Node.js is needed: make setup installs the page scripts with npm, which runs on it"

# Loads charts.js into a sandbox with uPlot and a document that only records listeners, then runs
# the scenario given on stdin and prints its JSON result.
HARNESS = r"""
const fs = require("fs"), vm = require("vm");
const uPlot = require(process.argv[1] + "/node_modules/uplot/dist/uPlot.cjs.js");
const sandbox = {window: {}, uPlot, document: {addEventListener() {}}, console, Math, JSON, Number, isFinite};
vm.createContext(sandbox);
vm.runInContext(fs.readFileSync(process.argv[1] + "/static/ceiling/charts.js", "utf8"), sandbox);
const C = sandbox.window.CeilingCharts;
const scenario = fs.readFileSync(0, "utf8");
const result = new Function("C", "uPlot", scenario)(C, uPlot);
process.stdout.write(JSON.stringify(result));
"""


def _node(scenario: str) -> object:
    done = subprocess.run([NODE, "-e", HARNESS, str(REPO)], input=scenario, capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# The ticks uPlot draws are the multiples of a step inside the scale's range; these helpers build
# them the same way for a given range and step.
TICKS = """
function ticks(lo, hi, step) {
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.round(v / step) * step);
  return out;
}
"""


def test_it_prints_distinct_tick_labels_for_a_near_flat_overlay() -> None:
    # Three runs at 25.00, 25.02 and 25.04 tok/s: uPlot's own range is a few hundredths wide.
    result = _node(TICKS + """
      const [lo, hi] = uPlot.rangeNum(25.0, 25.04, 0.1, true);
      const out = {};
      for (const step of [0.005, 0.01, 0.02]) {
        const t = ticks(lo, hi, step);
        out[step] = {old: t.map(C.formatNumber), now: C.linearTickLabels(null, t, 1, 50, step)};
      }
      return out;
    """)
    for step, labels in result.items():
        assert len(labels["now"]) >= 3, step
        assert len(set(labels["now"])) == len(labels["now"]), (step, labels["now"])
        # the magnitude-based format alone repeats itself here: what the axis used to show
        assert len(set(labels["old"])) < len(labels["old"]), (step, labels["old"])
    assert result["0.01"]["now"] == ["25.00", "25.01", "25.02", "25.03", "25.04"]


def test_it_gives_an_exactly_flat_series_a_band_around_its_value() -> None:
    result = _node(TICKS + """
      const r = C.flatRange(123.4, 123.4), z = C.flatRange(0, 0), neg = C.flatRange(-5, -5);
      return {r, z, neg, varying: C.flatRange(1, 2),
              labels: C.linearTickLabels(null, ticks(r[0], r[1], 5), 1, 50, 5)};
    """)
    assert result["r"] == [pytest.approx(111.06), pytest.approx(135.74)]
    assert result["z"] == [0, 1]  # non-negative data keeps a range starting at 0
    assert result["neg"] == [pytest.approx(-5.5), pytest.approx(-4.5)]
    assert result["varying"] is None  # uPlot's own range is used when the values differ
    assert result["labels"] == ["115", "120", "125", "130", "135"]


def test_it_draws_a_series_within_a_thousandth_of_its_size_as_flat() -> None:
    # 14.57820 to 14.57835 (a spread of 0.001 %) stretched over the plot gave ticks such as 14.57828.
    result = _node(TICKS + """
      const near = C.flatRange(14.5782, 14.57835);
      return {near, edge: C.flatRange(1000, 1001), past: C.flatRange(1000, 1001.5),
              labels: C.linearTickLabels(null, ticks(near[0], near[1], 0.5), 1, 50, 0.5)};
    """)
    assert result["near"] == [pytest.approx(13.12038), pytest.approx(16.036185)]
    assert result["labels"] == ["13.5", "14.0", "14.5", "15.0", "15.5", "16.0"], result["labels"]
    assert result["edge"] == [pytest.approx(900.0), pytest.approx(1101.0)]  # a spread of exactly 0.1 % is flat
    assert result["past"] is None  # more than 0.1 %: uPlot's own range


def test_it_chooses_decimals_from_the_tick_step() -> None:
    result = _node("return [5, 0.5, 0.25, 0.02, 0.0002, 2.5e-9].map(C.decimalsFor);")
    assert result == [0, 1, 2, 2, 4, 7]
    labels = _node("return C.linearTickLabels(null, [0, 2.5e-9, 5e-9], 1, 50, 2.5e-9);")
    assert len(set(labels)) == 3 and all("e" in lab for lab in labels[1:])


def test_it_ends_a_capped_axis_where_the_page_said_and_marks_a_single_point() -> None:
    result = _node("""
      const capped = {title: "ITL CDF", x: {label: "ITL", unit: "ms", log: false, max: 62.5},
                      y: {label: "fraction", unit: "", log: false},
                      series: [{label: "ITL", points: [[10, 0.5], [62.5, 0.999]], step: true}]};
      const one = {title: "TTFT CDF", x: {label: "TTFT", unit: "ms", log: false},
                   y: {label: "fraction", unit: "", log: false},
                   series: [{label: "TTFT", points: [[412.5, 1.0]], step: true}]};
      const a = C.buildOptions(capped, 600), b = C.buildOptions(one, 600);
      return {capped: a.scales.x.range(null, 10, 5000), single: b.scales.x.range(null, 412.5, 412.5),
              singlePoints: b.series[1].points.show, curvePoints: a.series[1].points.show};
    """)
    assert result["capped"] == [10, 62.5]
    assert result["single"] == [pytest.approx(371.25), pytest.approx(453.75)]
    assert result["singlePoints"] is True and result["curvePoints"] is False


def test_it_labels_every_tick_of_a_log_axis_by_one_rule_without_trailing_zeros() -> None:
    # The kernel job's time-vs-batch chart: both axes base-2 log; a y range of 0.4-40 µs gets ticks
    # at the powers of two, which printed "0.500" next to "4" and "32".
    result = _node("""
      const spec = {title: "time per call vs batch", x: {label: "batch", unit: "requests", log: true},
                    y: {label: "median time", unit: "µs", log: true},
                    series: [{label: "tiled", points: [[1, 0.4], [64, 40]]}]};
      const opts = C.buildOptions(spec, 600);
      return {y: opts.axes[1].values(null, [0.125, 0.25, 0.5, 1, 2, 4, 8, 16, 32]),
              x: opts.axes[0].values(null, [1, 2, 4, 8, 16, 32, 64, 1024, 131072, 2097152]),
              other: C.logTickLabels(null, [null, 0.0001, 0.0625, 1.5, 0.333333, 2500000])};
    """)
    assert result["y"] == ["0.125", "0.25", "0.5", "1", "2", "4", "8", "16", "32"]
    assert result["x"] == ["1", "2", "4", "8", "16", "32", "64", "1,024", "131,072", "2.097e+6"]
    assert result["other"] == ["", "1e-4", "0.0625", "1.5", "0.3333", "2.5e+6"]


def test_a_rate_axis_starts_at_zero_and_a_latency_axis_spans_its_data() -> None:
    # The sweep page's "Output throughput vs concurrency": 7.8 to 16.2 tok/s started at 8, which
    # drew a doubling as a rise from nothing; TPOT keeps a range around its values.
    result = _node("""
      function chart(unit) {
        return {title: "t", x: {label: "concurrency", unit: "requests", log: false},
                y: {label: "output", unit: unit, log: false},
                series: [{label: "64/16", points: [[1, 7.8], [2, 12.0], [4, 16.2]]}]};
      }
      const range = unit => C.buildOptions(chart(unit), 600).scales.y.range(null, 7.8, 16.2);
      return {tok: range("tok/s"), req: range("req/s"), ms: range("ms"), own: uPlot.rangeNum(7.8, 16.2, 0.1, true),
              flat: C.buildOptions(chart("tok/s"), 600).scales.y.range(null, 10, 10),
              negative: C.buildOptions(chart("tok/s"), 600).scales.y.range(null, -2, 5)};
    """)
    assert result["tok"] == [0, result["own"][1]] and result["req"] == result["tok"]
    assert result["own"][0] > 0 and result["ms"] == result["own"]
    assert result["flat"] == [0, pytest.approx(11)]   # the flat band (10 ± 10%) from 0
    assert result["negative"][0] < -2


def test_it_shows_series_names_not_dashes_in_a_legend_with_nothing_hovered() -> None:
    # uPlot asks each series for its legend value with idx null while no point is hovered; a dash
    # there ("concurrency (requests): — | 256/256: —") read as missing data.
    result = _node("""
      const spec = {title: "t", x: {label: "concurrency", unit: "requests"}, y: {label: "output", unit: "tok/s"},
                    series: [{label: "256/256", points: [[1, 10], [8, 80]]}]};
      const opts = C.buildOptions(spec, 600);
      const value = (i, v, idx) => opts.series[i].value(null, v, i, idx);
      return {idle: [value(0, null, null), value(1, null, null), value(1, 80, undefined)],
              hovered: [value(0, 8, 1), value(1, 80, 1), value(1, null, 1)],
              labels: opts.series.map(s => s.label), hooks: Object.keys(opts.hooks || {})};
    """)
    assert result == {"idle": ["", "", ""], "hovered": ["8 requests", "80 tok/s", "—"],
                      "labels": ["concurrency (requests)", "256/256"], "hooks": ["setLegend"]}


def test_ticks_and_legend_values_separate_thousands() -> None:
    # The E2E chart's ms axis printed "150000" and "100000" beside a table reading "24,890".
    result = _node("""
      return {linear: C.linearTickLabels(null, [0, 50000, 100000, 150000], 1, 50, 50000),
              decimals: C.linearTickLabels(null, [1000, 1002.5, 1005], 1, 50, 2.5),
              negative: C.linearTickLabels(null, [-2000, 0, 2000], 1, 50, 2000),
              small: C.linearTickLabels(null, [0, 250, 500], 1, 50, 250),
              legend: [C.formatNumber(24890), C.formatNumber(24890.4), C.formatNumber(999), C.formatNumber(2.5e6)]};
    """)
    assert result["linear"] == ["0", "50,000", "100,000", "150,000"]
    assert result["decimals"] == ["1,000.0", "1,002.5", "1,005.0"]
    assert result["negative"] == ["-2,000", "0", "2,000"]
    assert result["small"] == ["0", "250", "500"]
    assert result["legend"] == ["24,890", "24,890", "999", "2.50e+6"]


def test_a_ms_axis_past_ten_seconds_is_drawn_in_seconds() -> None:
    # E2E of a long run (ms values up to 150,000) is drawn in s, its title saying so; an axis that
    # stays under 10,000 ms, and any axis not in ms, are kept as they are.
    result = _node("""
      const e2e = {title: "E2E vs concurrency", x: {label: "concurrency", unit: "requests", log: true},
                   y: {label: "E2E mean", unit: "ms", log: false},
                   series: [{label: "256/256", points: [[1, 24890], [64, 150000]]}]};
      const short = {title: "TTFT vs concurrency", x: {label: "concurrency", unit: "requests", log: true},
                     y: {label: "TTFT mean", unit: "ms", log: false},
                     series: [{label: "256/256", points: [[1, 120], [64, 9000]]}]};
      // A CDF capped at 9,500 ms: what lies beyond the cap is not drawn, so it stays in ms.
      const capped = {title: "E2E CDF", x: {label: "E2E", unit: "ms", log: false, max: 9500},
                      y: {label: "fraction", unit: "", log: false, min: 0, max: 1},
                      series: [{label: "E2E", points: [[8000, 0.5], [9500, 0.999], [40000, 1]], step: true}]};
      const cdf = {title: "E2E CDF", x: {label: "E2E", unit: "ms", log: false, max: 30000},
                   y: {label: "fraction", unit: "", log: false, min: 0, max: 1},
                   series: [{label: "E2E", points: [[12000, 0.5], [30000, 1]], step: true}]};
      const s = C.inSeconds(e2e), opts = C.buildOptions(s, 600);
      return {points: s.series[0].points, title: C.axisTitle(s.y), x: C.axisTitle(s.x),
              original: e2e.series[0].points[1][1], short: C.axisTitle(C.inSeconds(short).y),
              shortPoints: C.inSeconds(short).series[0].points, capped: C.axisTitle(C.inSeconds(capped).x),
              cdf: {title: C.axisTitle(C.inSeconds(cdf).x), max: C.inSeconds(cdf).x.max,
                    points: C.inSeconds(cdf).series[0].points, y: C.inSeconds(cdf).y},
              hovered: opts.series[1].value(null, 24.89, 1, 0),
              ticks: opts.axes[1].values(null, [0, 50, 100, 150], 1, 50, 50)};
    """)
    assert result["points"] == [[1, 24.89], [64, 150]] and result["original"] == 150000
    assert result["title"] == "E2E mean (s)" and result["x"] == "concurrency (requests)"
    assert result["short"] == "TTFT mean (ms)" and result["shortPoints"] == [[1, 120], [64, 9000]]
    assert result["capped"] == "E2E (ms)"
    assert result["cdf"]["title"] == "E2E (s)" and result["cdf"]["max"] == 30
    assert result["cdf"]["points"] == [[12, 0.5], [30, 1]] and result["cdf"]["y"]["max"] == 1
    assert result["hovered"] == "24.9 s" and result["ticks"] == ["0", "50", "100", "150"]
