// Line charts for the benchmark pages, drawn with uPlot (served from npm under static/vendor/).
//
// A page embeds each chart's data with Django's json_script and marks the container:
//
//   {{ chart|json_script:"chart-ttft-cdf" }}
//   <div class="chart" data-chart="chart-ttft-cdf"></div>
//
// The embedded object is
//   { "title": str,
//     "x": {"label": str, "unit": str, "log": bool, "max": number (optional: where the axis ends)},
//     "y": {"label": str, "unit": str, "log": bool,
//           "min": number, "max": number (optional, both: a fixed range, e.g. 0-1 for a CDF),
//           "title": str (optional: the axis title drawn, where "label (unit)" would be long, e.g.
//           "tok/s per GPU")},
//     "series": [{"label": str, "points": [[x, y], ...], "step": bool}],
//     "empty": str (optional: shown instead of a chart without points),
//     "note": str (optional: printed under the chart, e.g. what lies beyond a capped axis) }
// Series may have different x values (CDFs of several runs): they are aligned on the union of
// x values (uPlot.join; alignSteps for CDFs, below), and a series has no point where it had no
// sample. Nulls in y are gaps. Charts are drawn on page load and again whenever htmx swaps in content holding one.
//
// A step series is an empirical CDF: its points are [value, fraction of samples <= value], the
// first at (smallest value, 1/n). It is drawn from (smallest value, 0): the rise of the first
// sample is part of the curve (a run of 2 requests is a step from 0 to 0.5, then one to 1.0, not
// a single step from 0.5). Where several values are equal, the fraction at that value is the
// largest of theirs (the points' last).
//
// Axes never repeat a tick label: a flat series (every value equal, or within 0.1 % of each
// other) gets a range around its value
// instead of a zero-height one, and linear ticks are printed with as many decimals as the tick
// step needs; log ticks follow one rule for the whole axis, with no trailing zeros (0.5, 4, 32).
// A series of one point is drawn as a marked point. A rate's y axis (unit tok/s, req/s: any
// "/s") starts at 0; other linear y axes span the data.
//
// Numbers print with thousands separated (150,000; 1,024; 24,890.5), as the tables print them.
// A ms axis whose drawn values reach past 10,000 ms is drawn in seconds (inSeconds): its values
// divided by 1000 and its title's unit "s", so that E2E reads 24.9 s as the CLI prints it, not
// 24890 ms; the legend then gives the hovered values in s too.
//
// An axis title is drawn whole: the y axis's title is centred on the plot's height, so a title
// longer than that height (PLOT_PX) would run off the chart's top and bottom; such a title is
// drawn in a smaller font that fits (labelFontFitting).
(function () {
  "use strict";

  // Colour-blind-safe palette (Okabe & Ito, 2008), in a fixed order so the same run keeps its
  // colour across the charts of one page.
  var PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"];
  var HEIGHT_PX = 280;
  // A flat series is drawn in a band of +/- this share of its value (or +/- 1 around zero).
  var FLAT_PAD = 0.1;
  // A series whose spread is under this share of its largest absolute value counts as flat.
  var NEAR_FLAT_SHARE = 1e-3;
  // Most decimals a tick label gets; finer steps are printed in exponent form.
  var MAX_DECIMALS = 6;

  // uPlot's axis title font (its default: bold 12 px in these families).
  var LABEL_PX = 12;
  var LABEL_FAMILY = 'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans", sans-serif';
  // The plot's height in a chart of HEIGHT_PX: less the x axis (ticks 50 px and its title 30 px,
  // uPlot's sizes) and the 17 px above the plot, less 8 px to spare.
  var PLOT_PX = HEIGHT_PX - 50 - 30 - 17 - 8;

  function axisTitle(axis) {
    if (!axis) return "";
    if (typeof axis.title === "string" && axis.title) return axis.title;
    return axis.unit ? axis.label + " (" + axis.unit + ")" : axis.label;
  }

  // The font to draw a y-axis title of text in: uPlot's, or where the text would be longer than
  // the plot is high, the same font made small enough to fit (at least 8 px). Measured on a
  // canvas of its own; where none can be made (no DOM), uPlot's.
  var measuring = null;
  function labelFontFitting(text) {
    var px = LABEL_PX;
    try {
      if (!measuring && typeof document !== "undefined" && typeof document.createElement === "function") {
        measuring = document.createElement("canvas").getContext("2d");
      }
    } catch (err) { measuring = null; }
    if (measuring && text) {
      measuring.font = "bold " + LABEL_PX + "px " + LABEL_FAMILY;
      var wide = measuring.measureText(text).width;
      if (wide > PLOT_PX) px = Math.max(8, Math.floor(LABEL_PX * PLOT_PX / wide));
    }
    return "bold " + px + "px " + LABEL_FAMILY;
  }

  // A number printed in plain digits ("150000", "-24890.5") with its whole part's thousands
  // separated ("150,000", "-24,890.5"); exponent forms and shorter numbers are left as they are.
  function grouped(text) {
    if (/e/i.test(text)) return text;
    return text.replace(/^(-?)(\d+)/, function (m, sign, whole) {
      return sign + whole.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    });
  }

  function formatNumber(v) {
    if (v === null || v === undefined || !isFinite(v)) return "—";
    if (Number.isInteger(v) && Math.abs(v) < 1e6) return grouped(String(v));
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2);
    if (a >= 100) return grouped(v.toFixed(0));
    if (a >= 10) return v.toFixed(1);
    return v.toFixed(a >= 1 ? 2 : 3);
  }

  // A ms axis is drawn in seconds once its largest drawn value is above this (ms).
  var SECONDS_ABOVE_MS = 10000;

  // The chart spec as drawn: a copy in which each ms axis ("unit": "ms") whose largest value
  // (up to the axis's cap, spec.x.max, where it has one) is above SECONDS_ABOVE_MS is in seconds:
  // its points' values, its min and max divided by 1000, its unit "s" (and "(ms)" in an own
  // title "(s)"). Other axes, and a spec with no such axis, are returned as they were.
  function inSeconds(spec) {
    var out = JSON.parse(JSON.stringify(spec || {}));
    ["x", "y"].forEach(function (key, k) {
      var axis = out[key];
      if (!axis || axis.unit !== "ms") return;
      var cap = typeof axis.max === "number" ? axis.max : Infinity;
      var largest = 0;
      (out.series || []).forEach(function (s) {
        (s.points || []).forEach(function (p) {
          var v = p[k];
          if (typeof v === "number" && isFinite(v) && Math.abs(v) <= cap) largest = Math.max(largest, Math.abs(v));
        });
      });
      if (!(largest > SECONDS_ABOVE_MS)) return;
      (out.series || []).forEach(function (s) {
        (s.points || []).forEach(function (p) {
          if (typeof p[k] === "number") p[k] = p[k] / 1000;
        });
      });
      ["min", "max"].forEach(function (f) { if (typeof axis[f] === "number") axis[f] = axis[f] / 1000; });
      axis.unit = "s";
      if (typeof axis.title === "string") axis.title = axis.title.replace(/\(ms\)/g, "(s)");
    });
    return out;
  }

  // Decimals needed to print multiples of a tick step exactly (0.25 -> 2, 5 -> 0, 2e-4 -> 4).
  function decimalsFor(step) {
    if (!(step > 0) || !isFinite(step)) return 0;
    for (var d = 0; d <= MAX_DECIMALS; d++) {
      var scaled = step * Math.pow(10, d);
      var whole = Math.round(scaled);
      if (whole >= 1 && Math.abs(scaled - whole) < 1e-6 * scaled) return d;
    }
    return MAX_DECIMALS + 1;
  }

  // Tick labels of a linear axis: every tick with the decimals its step needs, so two different
  // ticks never print the same text. uPlot passes the step it chose (foundIncr).
  function linearTickLabels(u, ticks, axisIdx, foundSpace, foundIncr) {
    var step = foundIncr;
    if (!(step > 0) && ticks.length > 1) step = Math.abs(ticks[1] - ticks[0]);
    var d = decimalsFor(step);
    var big = ticks.some(function (v) { return v !== null && Math.abs(v) >= 1e9; });
    return ticks.map(function (v) {
      if (v === null || v === undefined) return "";
      if (d > MAX_DECIMALS || big) return v.toExponential(Math.min(MAX_DECIMALS, Math.max(2, d - 1)));
      return grouped((Math.abs(v) < Math.pow(10, -d) / 2 ? 0 : v).toFixed(d));
    });
  }

  // A log axis's tick: a whole number below a million as it is, thousands separated (4, 32, 1,024,
  // 131,072), any other
  // to four significant figures without trailing zeros (0.5, 0.25, 0.0625, 1.5), exponent form
  // below 0.001 and from a million (1e-4, 1.049e+6). One rule for every tick of the axis: a base-2
  // log axis mixes fractions and whole numbers (0.5 next to 4 and 32), and a fixed number of
  // decimals per magnitude printed them as "0.500", "4", "32".
  function logTickNumber(v) {
    var a = Math.abs(v);
    if (Number.isInteger(v) && a < 1e6) return grouped(String(v));
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(3).replace(/\.?0+e/, "e");
    return grouped(String(Number(v.toPrecision(4))));
  }

  // uPlot leaves the minor ticks of a log axis unlabelled (null): an empty label, not a dash.
  function logTickLabels(u, ticks) {
    return ticks.map(function (v) {
      if (v === null || v === undefined) return "";
      return isFinite(v) ? logTickNumber(v) : "—";
    });
  }

  // The y range: uPlot's own for data that varies; a band around a flat series (min == max),
  // which would otherwise give a zero-height range whose ticks all round to the same label.
  // Data that is all >= 0 keeps a range that starts at >= 0.
  function flatRange(min, max) {
    if (min === null || max === null || !isFinite(min) || !isFinite(max)) return [0, 1];
    // A series that varies by less than NEAR_FLAT_SHARE of its size is drawn as flat: a span of
    // 14.57820 to 14.57835 would otherwise be stretched over the whole plot, with ticks such as
    // 14.57828 that show nothing a reader can use (the legend still gives each value).
    if (max > min && max - min > NEAR_FLAT_SHARE * Math.max(Math.abs(min), Math.abs(max))) return null;
    var pad = min === 0 ? 1 : Math.abs(min) * FLAT_PAD;
    var lo = min - pad;
    if (min >= 0 && lo < 0) lo = 0;
    return [lo, max + pad];
  }

  function yRange(u, min, max) {
    var flat = flatRange(min, max);
    if (flat) return flat;
    return uPlot.rangeNum(min, max, 0.1, true);
  }

  // The y range: fixed where the page gave one (spec.y.min and spec.y.max: a CDF's 0-1), else
  // yRange's; a rate (a y unit per second: tok/s, req/s) starts at 0, so that 7.8 to 16.2 tok/s
  // reads as a doubling and not as a rise from nothing (latencies keep yRange's span).
  function yRangeFor(spec) {
    var y = spec.y || {};
    if (typeof y.min === "number" && typeof y.max === "number" && y.max > y.min) {
      var fixed = [y.min, y.max];
      return function () { return fixed.slice(); };
    }
    if (/\/s$/.test(y.unit || "")) {
      return function (u, min, max) {
        var r = yRange(u, min, max);
        return [Math.min(0, r[0]), r[1]];
      };
    }
    return yRange;
  }

  // The x range: ends at spec.x.max when the page capped the axis (outliers are listed in the
  // chart's note); a single x value gets a band around it like a flat y series.
  function xRangeFor(spec) {
    var cap = spec.x && typeof spec.x.max === "number" ? spec.x.max : null;
    return function (u, min, max) {
      if (cap !== null && (max === null || max > cap)) max = cap;
      var flat = flatRange(min, max);
      if (flat) return flat;
      return [min, max];
    };
  }

  function sortedPoints(s) {
    return (s.points || []).slice().sort(function (a, b) { return a[0] - b[0]; });
  }

  // A CDF (step series) as the points drawn: one point per distinct value, at the largest
  // fraction given for it, led by (smallest value, 0) so the first sample's rise is drawn.
  function cdfPoints(s) {
    var out = [];
    sortedPoints(s).forEach(function (p) {
      if (p[1] === null || p[1] === undefined) return;
      if (out.length && out[out.length - 1][0] === p[0]) out[out.length - 1] = p;
      else out.push(p);
    });
    if (out.length && out[0][1] > 0) out.unshift([out[0][0], 0]);
    return out;
  }

  // Charts with step series: the union of x values, each value once, plus a second slot before
  // each CDF's smallest value (uPlot.join keeps one y per x and series, which would drop the
  // CDF's (smallest value, 0)). A series fills the slots of its own x values; a CDF's leading 0
  // goes in the first slot of its smallest value, every other point in the last slot of its x,
  // and a slot a series has no point for stays undefined (not drawn, spanned over).
  function alignSteps(series) {
    var lists = series.map(function (s) {
      return s.step ? cdfPoints(s) : sortedPoints(s);
    });
    var slots = new Map();
    lists.forEach(function (pts, i) {
      pts.forEach(function (p, k) {
        var n = series[i].step && k === 0 && pts.length > 1 && pts[1][0] === p[0] ? 2 : 1;
        slots.set(p[0], Math.max(slots.get(p[0]) || 0, n));
      });
    });
    var xs = [];
    var first = new Map();
    Array.from(slots.keys()).sort(function (a, b) { return a - b; }).forEach(function (x) {
      first.set(x, xs.length);
      for (var k = 0; k < slots.get(x); k++) xs.push(x);
    });
    var data = [xs];
    lists.forEach(function (pts, i) {
      var ys = new Array(xs.length).fill(undefined);
      pts.forEach(function (p, k) {
        var leading = series[i].step && k === 0 && pts.length > 1 && pts[1][0] === p[0];
        var at = first.get(p[0]) + (leading ? 0 : slots.get(p[0]) - 1);
        ys[at] = p[1];
      });
      data.push(ys);
    });
    return data;
  }

  // Turn the per-series [[x, y], ...] lists into uPlot's aligned columns.
  function alignedData(series) {
    if (series.some(function (s) { return s.step; })) return alignSteps(series);
    var tables = series.map(function (s) {
      var pts = sortedPoints(s);
      return [pts.map(function (p) { return p[0]; }), pts.map(function (p) { return p[1]; })];
    });
    if (tables.length === 1) return tables[0];
    return uPlot.join(tables);
  }

  // The markers of a step series: its samples (the indices with a fraction above 0), not the
  // leading 0 it is drawn from. uPlot calls it as points.filter(u, seriesIdx, show).
  function samplesOnly(u, seriesIdx, show) {
    if (!show) return null;
    var ys = u.data[seriesIdx];
    var idxs = [];
    for (var i = 0; i < ys.length; i++) if (ys[i] !== null && ys[i] !== undefined && ys[i] > 0) idxs.push(i);
    return idxs;
  }

  function buildOptions(spec, width) {
    var xUnit = spec.x && spec.x.unit ? " " + spec.x.unit : "";
    var yUnit = spec.y && spec.y.unit ? " " + spec.y.unit : "";
    var xLog = !!(spec.x && spec.x.log);
    var yLog = !!(spec.y && spec.y.log);
    // The legend gives values only for the hovered point (idx set); with nothing hovered it shows the
    // series names alone: a dash there read as missing data.
    var series = [{
      label: axisTitle(spec.x),
      value: function (u, v, si, idx) { return legendValue(v, idx, xUnit); }
    }];
    spec.series.forEach(function (s, i) {
      var n = (s.points || []).length;
      series.push({
        label: s.label,
        stroke: PALETTE[i % PALETTE.length],
        fill: n === 1 ? PALETTE[i % PALETTE.length] : undefined,
        width: 2,
        spanGaps: true,
        // A single point has no line to draw: mark it. Step series (CDFs) draw no markers otherwise,
        // and a one-sample CDF marks its sample, not the 0 it is drawn from.
        points: { show: n === 1 || (!s.step && n <= 40), size: n === 1 ? 9 : 5,
                  filter: s.step ? samplesOnly : undefined },
        paths: s.step && uPlot.paths && uPlot.paths.stepped ? uPlot.paths.stepped({ align: 1 }) : undefined,
        value: function (u, v, si, idx) { return legendValue(v, idx, yUnit); }
      });
    });
    var xScale = { time: false, distr: xLog ? 3 : 1, log: 2 };
    if (!xLog) xScale.range = xRangeFor(spec);
    var yScale = { distr: yLog ? 3 : 1, log: 2 };
    if (!yLog) yScale.range = yRangeFor(spec);
    return {
      title: spec.title || "",
      width: width,
      height: HEIGHT_PX,
      series: series,
      scales: {
        // Base 2 on a log axis: load grids double (1, 2, 4, 8, ...), so every point gets a tick.
        x: xScale,
        y: yScale
      },
      axes: [
        { label: axisTitle(spec.x), values: xLog ? logTickLabels : linearTickLabels },
        { label: axisTitle(spec.y), labelFont: labelFontFitting(axisTitle(spec.y)), size: 64,
          values: yLog ? logTickLabels : linearTickLabels }
      ],
      legend: { live: true },
      hooks: { setLegend: [markLegendIdle] },
      cursor: { drag: { x: true, y: false } }
    };
  }

  // A legend value: "" with nothing hovered (idx null or undefined), "—" for a hovered point a series
  // has no value at, else the number and unit.
  function legendValue(v, idx, unit) {
    if (idx === null || idx === undefined) return "";
    return v === null || v === undefined ? "—" : formatNumber(v) + unit;
  }

  // The legend carries "legend-idle" while nothing is hovered: benchmarks.css then shows the series
  // names only (no "label:" waiting for a value, no row for the x axis, which is not a series).
  function markLegendIdle(u) {
    var legend = u.root && u.root.querySelector ? u.root.querySelector(".u-legend") : null;
    if (!legend) return;
    var idle = u.legend.idx === null || u.legend.idx === undefined;
    if (idle) legend.classList.add("legend-idle");
    else legend.classList.remove("legend-idle");
  }

  // The width inside the container's padding: a chart (and its legend) drawn at clientWidth, which
  // counts the padding, ran past the right edge of its card by that much.
  function contentWidth(el) {
    var style = window.getComputedStyle ? window.getComputedStyle(el) : null;
    var pad = style ? (parseFloat(style.paddingLeft) || 0) + (parseFloat(style.paddingRight) || 0) : 0;
    return Math.floor(el.clientWidth - pad);
  }

  function addNote(container, spec) {
    if (!spec.note) return;
    var note = document.createElement("p");
    note.className = "muted small chart-note";
    note.textContent = spec.note;
    container.appendChild(note);
  }

  function draw(container) {
    if (container.getAttribute("data-drawn") === "1") return;
    var source = document.getElementById(container.getAttribute("data-chart"));
    if (!source || typeof uPlot === "undefined") return;
    var spec = inSeconds(JSON.parse(source.textContent));
    var hasPoints = (spec.series || []).some(function (s) { return (s.points || []).length > 0; });
    container.setAttribute("data-drawn", "1");
    if (!hasPoints) {
      var empty = document.createElement("p");
      empty.className = "muted small chart-empty";
      empty.textContent = (spec.title ? spec.title + ": " : "") + (spec.empty || "no data to draw.");
      container.appendChild(empty);
      return;
    }
    var width = Math.max(320, contentWidth(container) || 560);
    var chart = new uPlot(buildOptions(spec, width), alignedData(spec.series), container);
    markLegendIdle(chart);
    addNote(container, spec);
    // Follow the container's width (the grid of charts reflows with the window).
    if (typeof ResizeObserver !== "undefined") {
      new ResizeObserver(function () {
        var w = Math.max(320, contentWidth(container));
        if (Math.abs(w - chart.width) > 4) chart.setSize({ width: w, height: HEIGHT_PX });
      }).observe(container);
    }
  }

  function drawAll(root) {
    if (!root || !root.querySelectorAll) return;
    Array.prototype.forEach.call(root.querySelectorAll("[data-chart]"), draw);
    if (root.matches && root.matches("[data-chart]")) draw(root);
  }

  window.CeilingCharts = {
    drawAll: drawAll, alignedData: alignedData, formatNumber: formatNumber, buildOptions: buildOptions,
    decimalsFor: decimalsFor, grouped: grouped, inSeconds: inSeconds, legendValue: legendValue, axisTitle: axisTitle, labelFontFitting: labelFontFitting, linearTickLabels: linearTickLabels, logTickLabels: logTickLabels, flatRange: flatRange,
    xRangeFor: xRangeFor,
    yRangeFor: yRangeFor
  };
  document.addEventListener("DOMContentLoaded", function () { drawAll(document); });
  document.addEventListener("htmx:load", function (event) { drawAll(event.detail.elt); });
})();
