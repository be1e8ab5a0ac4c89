// Line charts for the benchmark pages, drawn with uPlot (served from npm under static/vendor/).
//
// A page embeds each chart's data with Django's json_script and marks the container:
//
//   {{ chart|json_script:"chart-ttft-cdf" }}
//   <div class="chart" data-chart="chart-ttft-cdf"></div>
//
// The embedded object is
//   { "title": str,
//     "x": {"label": str, "unit": str, "log": bool},
//     "y": {"label": str, "unit": str, "log": bool},
//     "series": [{"label": str, "points": [[x, y], ...], "step": bool}] }
// Series may have different x values (CDFs of several runs): they are aligned on the union of
// x values with uPlot.join, and a series has no point where it had no sample. Nulls in y are
// gaps. Charts are drawn on page load and again whenever htmx swaps in content holding one.
(function () {
  "use strict";

  // Colour-blind-safe palette (Okabe & Ito, 2008), in a fixed order so the same run keeps its
  // colour across the charts of one page.
  var PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"];
  var HEIGHT_PX = 280;

  function axisTitle(axis) {
    if (!axis) return "";
    return axis.unit ? axis.label + " (" + axis.unit + ")" : axis.label;
  }

  function formatNumber(v) {
    if (v === null || v === undefined || !isFinite(v)) return "—";
    if (Number.isInteger(v) && Math.abs(v) < 1e6) return String(v);
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2);
    if (a >= 100) return v.toFixed(0);
    if (a >= 10) return v.toFixed(1);
    return v.toFixed(a >= 1 ? 2 : 3);
  }

  // uPlot leaves the minor ticks of a log axis unlabelled (null): an empty label, not a dash.
  function tickLabels(u, ticks) {
    return ticks.map(function (v) { return v === null || v === undefined ? "" : formatNumber(v); });
  }

  // Turn the per-series [[x, y], ...] lists into uPlot's aligned columns.
  function alignedData(series) {
    var tables = series.map(function (s) {
      var pts = (s.points || []).slice().sort(function (a, b) { return a[0] - b[0]; });
      return [pts.map(function (p) { return p[0]; }), pts.map(function (p) { return p[1]; })];
    });
    if (tables.length === 1) return tables[0];
    return uPlot.join(tables);
  }

  function buildOptions(spec, width) {
    var xUnit = spec.x && spec.x.unit ? " " + spec.x.unit : "";
    var yUnit = spec.y && spec.y.unit ? " " + spec.y.unit : "";
    var series = [{
      label: axisTitle(spec.x),
      value: function (u, v) { return v === null || v === undefined ? "—" : formatNumber(v) + xUnit; }
    }];
    spec.series.forEach(function (s, i) {
      series.push({
        label: s.label,
        stroke: PALETTE[i % PALETTE.length],
        width: 2,
        spanGaps: true,
        points: { show: !s.step && (s.points || []).length <= 40 },
        paths: s.step && uPlot.paths && uPlot.paths.stepped ? uPlot.paths.stepped({ align: 1 }) : undefined,
        value: function (u, v) { return v === null || v === undefined ? "—" : formatNumber(v) + yUnit; }
      });
    });
    return {
      title: spec.title || "",
      width: width,
      height: HEIGHT_PX,
      series: series,
      scales: {
        // Base 2 on a log axis: load grids double (1, 2, 4, 8, ...), so every point gets a tick.
        x: { time: false, distr: spec.x && spec.x.log ? 3 : 1, log: 2 },
        y: { distr: spec.y && spec.y.log ? 3 : 1, log: 2 }
      },
      axes: [
        { label: axisTitle(spec.x), values: tickLabels },
        { label: axisTitle(spec.y), size: 64, values: tickLabels }
      ],
      legend: { live: true },
      cursor: { drag: { x: true, y: false } }
    };
  }

  function draw(container) {
    if (container.getAttribute("data-drawn") === "1") return;
    var source = document.getElementById(container.getAttribute("data-chart"));
    if (!source || typeof uPlot === "undefined") return;
    var spec = JSON.parse(source.textContent);
    var hasPoints = (spec.series || []).some(function (s) { return (s.points || []).length > 0; });
    container.setAttribute("data-drawn", "1");
    if (!hasPoints) {
      var empty = document.createElement("p");
      empty.className = "muted small chart-empty";
      empty.textContent = (spec.title ? spec.title + ": " : "") + (spec.empty || "no data to draw.");
      container.appendChild(empty);
      return;
    }
    var width = Math.max(320, container.clientWidth || 560);
    var chart = new uPlot(buildOptions(spec, width), alignedData(spec.series), container);
    // Follow the container's width (the grid of charts reflows with the window).
    if (typeof ResizeObserver !== "undefined") {
      new ResizeObserver(function () {
        var w = Math.max(320, container.clientWidth);
        if (Math.abs(w - chart.width) > 4) chart.setSize({ width: w, height: HEIGHT_PX });
      }).observe(container);
    }
  }

  function drawAll(root) {
    if (!root || !root.querySelectorAll) return;
    Array.prototype.forEach.call(root.querySelectorAll("[data-chart]"), draw);
    if (root.matches && root.matches("[data-chart]")) draw(root);
  }

  window.CeilingCharts = { drawAll: drawAll, alignedData: alignedData, formatNumber: formatNumber };
  document.addEventListener("DOMContentLoaded", function () { drawAll(document); });
  document.addEventListener("htmx:load", function (event) { drawAll(event.detail.elt); });
})();
