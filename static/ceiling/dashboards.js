// Live dashboards drawn from the websocket (live.js): the node page, the deployment page (live,
// or the stored telemetry of a past deployment), the sweep page's live progress and the wall.
//
// The server renders each page's skeleton (one tile per GPU, one row per process, ...) with
// data-* hooks; this file fills in the numbers as messages arrive. Rules it keeps:
// * a number that is unknown (null in a sample) is shown as "unavailable" with the raw reason in
//   its tooltip, never as 0;
// * numbers carry their unit (GiB, %, W, °C, MHz, tok/s);
// * a sample older than 3 sampling intervals (at least 5 s) is marked stale with its time, and
//   while the socket is down every live number is greyed under "reconnecting… stale since";
// * charts use uPlot (served from npm under static/vendor/uplot); a null is a gap, not a zero.
(function () {
  "use strict";

  var GIB = 1024 * 1024 * 1024;
  var HISTORY_WINDOW_S = 600;       // sparklines keep the last 10 minutes
  var STALE_MIN_S = 5;
  var TICK_MS = 1000;
  var SERVER_PROBE_MS = 2000;     // the wall's question to its server while not live

  // --- formatting ---------------------------------------------------------------------------

  function isNum(v) { return typeof v === "number" && isFinite(v); }
  function gib(bytes) { return isNum(bytes) ? (bytes / GIB).toFixed(1) : null; }
  function fixed(v, digits) { return isNum(v) ? v.toFixed(digits) : null; }
  // Bytes in GiB (one decimal) from 1 GiB up, in MiB below: "0.0 GiB" says nothing.
  function size(bytes) {
    if (!isNum(bytes)) return null;
    return bytes >= GIB ? (bytes / GIB).toFixed(1) + " GiB" : Math.round(bytes / (1024 * 1024)) + " MiB";
  }
  // A number's whole part with its thousands separated, as the benchmark charts and tables print
  // it (12000 -> "12,000", 1234.5 -> "1,234.5"); exponent forms are left as they are.
  function grouped(v) {
    var text = String(v);
    if (/e/i.test(text)) return text;
    return text.replace(/^(-?)(\d+)/, function (m, sign, whole) { return sign + whole.replace(/\B(?=(\d{3})+(?!\d))/g, ","); });
  }
  function sum(values) {
    var known = values.filter(isNum);
    if (!known.length) return null;
    return known.reduce(function (a, b) { return a + b; }, 0);
  }
  function ago(seconds) {
    if (!isNum(seconds)) return "";
    if (seconds < 1) return "just now";
    if (seconds < 120) return Math.round(seconds) + " s ago";
    return Math.round(seconds / 60) + " min ago";
  }

  function field(root, name) { return root ? root.querySelector('[data-f="' + name + '"]') : null; }
  // A badge's own text, not its stale words (see setBadge).
  function badgeText(el) { return window.CeilingStale ? window.CeilingStale.text(el) : (el ? el.textContent : ""); }

  // Write a value with its unit, or "unavailable" (with the reason as tooltip) when unknown.
  function show(el, text, unit, reason) {
    if (!el) return;
    if (text === null || text === undefined) {
      // Big-number slots (the wall's tiles) get a compact "n/a"; the reason is the tooltip.
      el.textContent = el.closest && el.closest(".wall-figures, [data-compact-na]") ? "n/a" : "unavailable";
      el.classList.add("na");
      el.title = reason ? "unavailable: " + reason : "unavailable";
    } else {
      el.textContent = unit ? text + " " + unit : String(text);
      el.classList.remove("na");
      el.title = "";
    }
  }
  function set(root, name, text, unit, reason) { show(field(root, name), text, unit, reason); }

  function bar(el, fraction) {
    if (!el) return;
    if (!isNum(fraction)) { el.style.width = "0"; el.parentNode.classList.add("na"); return; }
    el.parentNode.classList.remove("na");
    var pct = Math.max(0, Math.min(1, fraction)) * 100;
    el.style.width = pct.toFixed(1) + "%";
    el.parentNode.classList.toggle("high", pct >= 90);
  }

  function healthClass(text) {
    var t = String(text || "").toLowerCase();
    if (/^(healthy|ready|ok)/.test(t)) return "ok";
    if (/^(down|failed|killed|exited|unhealthy|dead)/.test(t)) return "bad";
    if (/^(starting|degraded|stale|pending|spawned|restart|stopping)/.test(t)) return "warn";
    return "";
  }

  function statusClass(status) {
    if (status === "ready") return "ok";
    if (status === "failed" || status === "killed") return "bad";
    if (status === "pending" || status === "starting" || status === "stopping" || status === "spawned") return "warn";
    return "";
  }

  // A wall tile marked data-as-last-seen (its node agent is offline, the server said so) shows
  // the stored status as last seen, and keeps the server's "last seen healthy at ..." badges: a
  // sample replayed from before the agent went away is no live fact.
  function asLastSeen(root) { return !!(root && root.hasAttribute("data-as-last-seen")); }
  function statusText(root, status) {
    return asLastSeen(root) && !TERMINAL.test(status || "") ? status + " (as last seen)" : status;
  }

  // A badge marked stale (ceiling.js: data-stale-label, while its panel is not live) keeps the
  // new text for when it is live again and reads as last seen meanwhile.
  function setBadge(el, text, cls) {
    if (!el) return;
    if (window.CeilingStale) window.CeilingStale.write(el, text);
    else el.textContent = text;
    el.className = el.className.replace(/\b(ok|warn|bad)\b/g, "").trim();
    if (cls) el.classList.add(cls);
  }

  // --- charts (uPlot) -----------------------------------------------------------------------

  // Tick steps of time axes, seconds: whole seconds to hours.
  var TIME_INCRS_S = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

  // A small line over time: values pushed as they arrive, the last 10 minutes kept.
  function Spark(el, options) {
    this.el = el;
    this.options = options || {};
    this.xs = [];
    this.ys = [];
    this.u = null;
  }
  Spark.prototype.push = function (t, v) {
    if (!isNum(t)) return;
    if (this.xs.length && t <= this.xs[this.xs.length - 1]) return;
    this.xs.push(t);
    this.ys.push(isNum(v) ? v : null);
    this._trim();
    this.draw();
  };
  Spark.prototype.load = function (ts, vs) {
    if (!ts || !vs) return;
    var xs = [], ys = [];
    for (var i = 0; i < ts.length; i++) {
      if (!isNum(ts[i])) continue;
      xs.push(ts[i]);
      ys.push(isNum(vs[i]) ? vs[i] : null);
    }
    // History first, then whatever arrived live after its last point.
    var lastHist = xs.length ? xs[xs.length - 1] : -Infinity;
    for (var j = 0; j < this.xs.length; j++) {
      if (this.xs[j] > lastHist) { xs.push(this.xs[j]); ys.push(this.ys[j]); }
    }
    this.xs = xs;
    this.ys = ys;
    this._trim();
    this.draw();
  };
  Spark.prototype._trim = function () {
    if (!this.xs.length) return;
    var cutoff = this.xs[this.xs.length - 1] - (this.options.windowS || HISTORY_WINDOW_S);
    while (this.xs.length && this.xs[0] < cutoff) { this.xs.shift(); this.ys.shift(); }
  };
  Spark.prototype.draw = function () {
    if (typeof uPlot === "undefined" || !this.el) return;
    var big = !!this.options.axes;
    // A chart with axes and not one value to plot would be bare axes over 0-1, which reads as
    // "measured, and nothing"; its options.empty line (text, or a function giving it) says
    // instead that nothing was recorded. The chart comes back with the first value.
    if (big && this.options.empty && !this.ys.some(isNum)) { this._showEmpty(); return; }
    if (this._emptyNote) { this._emptyNote.remove(); this._emptyNote = null; }
    if (this.xs.length < 2) return;
    var data = [this.xs.slice(), this.ys.slice()];
    if (this.u) { this.u.setData(data); return; }
    var unit = this.options.unit || "";
    var width = Math.max(60, this.el.clientWidth || 100);
    var opts = {
      width: width,
      height: this.options.height || (big ? 180 : 38),
      legend: { show: false },
      cursor: { show: big, drag: { x: false, y: false } },
      // Ticks fall on whole UTC seconds, minutes and hours, labelled in UTC (CeilingLive.clock).
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"); },
      scales: { x: { time: true }, y: { range: this.options.range || function (u, min, max) {
        var lo = Math.min(0, isNum(min) ? min : 0);
        var hi = isNum(max) && max > lo ? max * 1.1 : lo + 1;
        return [lo, hi];
      } } },
      // Time ticks at least 80 px apart on whole seconds, minutes or hours, so labels never
      // repeat or touch; hh:mm:ss shows the seconds a short window needs.
      axes: big ? [{ space: 80, incrs: TIME_INCRS_S,
                     values: function (u, ticks) { return ticks.map(function (t) { return CeilingLive.clock(t); }); } },
                   { size: 70, values: function (u, ticks) { return ticks.map(function (v) { return grouped(v) + (unit ? " " + unit : ""); }); } }]
                : [{ show: false }, { show: false }],
      series: [{}, {
        label: this.options.label || "",
        stroke: this.options.color || "#1f5fbf",
        fill: this.options.fill || "rgba(31,95,191,0.10)",
        width: big ? 2 : 1.5,
        spanGaps: false,
        points: { show: false },
        value: function (u, v) { return isNum(v) ? (Math.round(v * 10) / 10) + (unit ? " " + unit : "") : "—"; }
      }]
    };
    this.u = new uPlot(opts, data, this.el);
    var self = this;
    if (typeof ResizeObserver !== "undefined" && !this._observed) {
      this._observed = true;
      new ResizeObserver(function () {
        var w = Math.max(60, self.el.clientWidth);
        if (self.u && Math.abs(w - self.u.width) > 4) self.u.setSize({ width: w, height: self.u.height });
      }).observe(this.el);
    }
  };
  // The options.empty line in place of the chart (any drawn one removed).
  Spark.prototype._showEmpty = function () {
    if (this.u) { this.u.destroy(); this.u = null; }
    if (!this._emptyNote) {
      this._emptyNote = document.createElement("p");
      this._emptyNote.className = "muted small chart-empty";
      this._emptyNote.setAttribute("data-chart-empty", "");
      this.el.appendChild(this._emptyNote);
    }
    var empty = this.options.empty;
    this._emptyNote.textContent = typeof empty === "function" ? empty() : empty;
  };

  function sparkOf(root, name, options) {
    var el = root.querySelector('[data-spark="' + name + '"]');
    if (!el) return null;
    if (!el._spark) el._spark = new Spark(el, options);
    return el._spark;
  }

  // --- sample freshness ---------------------------------------------------------------------

  // Marks a root "sample-stale" once its last sample is older than 3 intervals (>= 5 s) and
  // writes the sample time; called from a 1 s ticker.
  function freshness(root, t, interval) {
    var el = field(root, "sample-age");
    if (!isNum(t)) {
      if (el) el.textContent = root._ended ? "none: the deployment ended first" : "no sample yet";
      root.classList.add("sample-stale");
      return;
    }
    var age = Date.now() / 1000 - t;
    var limit = Math.max(STALE_MIN_S, 3 * (isNum(interval) ? interval : 0.5));
    var stale = age > limit;
    root.classList.toggle("sample-stale", stale);
    if (el) el.textContent = stale ? "no sample since " + CeilingLive.clockUtc(t) + " (" + ago(age) + ")"
                                   : "sample at " + CeilingLive.clockUtc(t);
  }

  // --- node ---------------------------------------------------------------------------------

  function processLabel(p) {
    if (p.owner === "ceiling" && p.deployment_id !== null && p.deployment_id !== undefined) {
      return "deployment #" + p.deployment_id + (p.role ? " " + p.role : "");
    }
    return "other process";
  }

  function renderGpu(tile, gpu, t, sparks) {
    var reasons = gpu.unavailable || {};
    var mem = gpu.memory || {};
    var used = mem.used_bytes, total = mem.total_bytes;
    bar(field(tile, "mem-fill"), isNum(used) && isNum(total) && total > 0 ? used / total : null);
    var memText = isNum(used) && isNum(total) ? gib(used) + " / " + gib(total) : null;
    set(tile, "mem", memText, "GiB", reasons["memory.used_bytes"] || reasons["memory.total_bytes"] || reasons.memory);
    set(tile, "util", isNum(gpu.utilization_pct) ? gpu.utilization_pct : null, "%", reasons.utilization_pct || reasons.utilization);
    set(tile, "memutil", isNum(gpu.memory_utilization_pct) ? gpu.memory_utilization_pct : null, "%", reasons.memory_utilization_pct);
    var power = isNum(gpu.power_w) ? gpu.power_w.toFixed(0) + (isNum(gpu.power_limit_w) ? " / " + gpu.power_limit_w.toFixed(0) : "") : null;
    set(tile, "power", power, "W", reasons.power_w || reasons.power);
    set(tile, "temp", isNum(gpu.temperature_c) ? gpu.temperature_c : null, "°C", reasons.temperature_c || reasons.temperature);
    set(tile, "clock", isNum(gpu.sm_clock_mhz) ? gpu.sm_clock_mhz : null, "MHz", reasons.sm_clock_mhz);
    var mig = field(tile, "mig");
    if (mig) mig.textContent = gpu.mig_mode === true ? "MIG-partitioned" : gpu.mig_mode === false ? "" : "MIG mode unknown";
    var name = field(tile, "name");
    if (name && gpu.name && !name.textContent.trim()) name.textContent = gpu.name;
    if (sparks) {
      var s;
      if ((s = sparkOf(tile, "util", { unit: "%", range: [0, 100] }))) s.push(t, gpu.utilization_pct);
      if ((s = sparkOf(tile, "power", { unit: "W", color: "#9a6700", fill: "rgba(154,103,0,0.10)" }))) s.push(t, gpu.power_w);
      if ((s = sparkOf(tile, "temp", { unit: "°C", color: "#b42318", fill: "rgba(180,35,24,0.08)" }))) s.push(t, gpu.temperature_c);
    }
    var procs = field(tile, "procs");
    if (procs) {
      procs.textContent = "";
      (gpu.processes || []).forEach(function (p) {
        var li = document.createElement("li");
        li.className = p.owner === "ceiling" ? "ceiling" : "other";
        li.textContent = "pid " + p.pid + " · " + (isNum(p.used_bytes) ? gib(p.used_bytes) + " GiB" : "memory unavailable") + " · " + processLabel(p);
        procs.appendChild(li);
      });
      if (!(gpu.processes || []).length) {
        var none = document.createElement("li");
        none.className = "muted";
        none.textContent = "no processes";
        procs.appendChild(none);
      }
    }
  }

  function renderHost(root, host, t, sparks) {
    if (!host) return;
    set(root, "cpu", fixed(host.cpu_pct, 0), "%");
    var mem = host.memory || {};
    set(root, "hostmem", isNum(mem.used_bytes) && isNum(mem.total_bytes) ? gib(mem.used_bytes) + " / " + gib(mem.total_bytes) : null, "GiB");
    bar(field(root, "hostmem-fill"), isNum(mem.used_bytes) && isNum(mem.total_bytes) && mem.total_bytes > 0 ? mem.used_bytes / mem.total_bytes : null);
    set(root, "load", Array.isArray(host.loadavg) ? host.loadavg.map(function (v) { return isNum(v) ? v.toFixed(2) : "?"; }).join(" ") : null, "");
    var numa = field(root, "numa");
    if (numa) {
      var per = host.cpu_pct_per_numa || {};
      Object.keys(per).sort(function (a, b) { return +a - +b; }).forEach(function (k) {
        var row = numa.querySelector('[data-numa="' + k + '"]');
        if (!row) {
          row = document.createElement("div");
          row.className = "numa-row";
          row.setAttribute("data-numa", k);
          row.innerHTML = '<span class="numa-label"></span><span class="bar"><span class="fill"></span></span><span class="live-value numa-pct"></span>';
          row.querySelector(".numa-label").textContent = "NUMA " + k;
          numa.appendChild(row);
        }
        bar(row.querySelector(".fill"), isNum(per[k]) ? per[k] / 100 : null);
        show(row.querySelector(".numa-pct"), fixed(per[k], 0), "%");
      });
    }
    if (sparks) {
      var s = sparkOf(root, "cpu", { unit: "%", range: [0, 100] });
      if (s) s.push(t, host.cpu_pct);
    }
  }

  function gpuTile(root, gpu) {
    var tile = root.querySelector('[data-gpu-index="' + gpu.index + '"]');
    if (tile) return tile;
    // A GPU the database does not know (yet): add a tile from the template.
    var tpl = root.querySelector("template[data-gpu-template]");
    var holder = root.querySelector("[data-gpus]");
    if (!tpl || !holder) return null;
    tile = tpl.content.firstElementChild.cloneNode(true);
    tile.setAttribute("data-gpu-index", gpu.index);
    var label = field(tile, "index");
    if (label) label.textContent = "GPU " + gpu.index;
    holder.appendChild(tile);
    var empty = root.querySelector("[data-no-gpu]");
    if (empty && !empty.hasAttribute("data-keep")) empty.hidden = true;
    return tile;
  }

  function renderNode(root, data, sparks) {
    var t = data.t;
    root._sample = { t: t, interval: data.interval_s };
    var nvml = field(root, "nvml");
    if (nvml) {
      // The page may already give this reason (the node page's GPUs line): then the notice points
      // there instead of saying it again; a different reason, read live, is said in full.
      var shown = nvml.getAttribute("data-reason-shown");
      nvml.textContent = data.nvml === "ok" ? ""
        : shown && data.nvml === shown ? "NVML unavailable: the GPUs line above says why"
        : "NVML unavailable: " + (data.nvml || "no reason given");
      nvml.hidden = data.nvml === "ok";
      // On a host without GPUs that is expected, not a warning.
      var expected = !root.querySelector("[data-gpu-index]:not(template)");
      nvml.classList.toggle("warn", !expected);
      nvml.classList.toggle("expected", expected);
    }
    (data.gpus || []).forEach(function (gpu) {
      var tile = gpuTile(root, gpu);
      if (tile) renderGpu(tile, gpu, t, sparks);
    });
    renderHost(root, data.host, t, sparks);
    freshness(root, t, data.interval_s);
  }

  function nodeHistory(root, body) {
    var h = body && body.history;
    if (!h || !h.t) return;
    var gpus = h.gpus || {};
    Object.keys(gpus).forEach(function (index) {
      var tile = root.querySelector('[data-gpu-index="' + index + '"]');
      if (!tile) return;
      var series = gpus[index] || {};
      var s;
      if ((s = sparkOf(tile, "util", { unit: "%", range: [0, 100] }))) s.load(h.t, series.utilization_pct);
      if ((s = sparkOf(tile, "power", { unit: "W", color: "#9a6700", fill: "rgba(154,103,0,0.10)" }))) s.load(h.t, series.power_w);
      if ((s = sparkOf(tile, "temp", { unit: "°C", color: "#b42318", fill: "rgba(180,35,24,0.08)" }))) s.load(h.t, series.temperature_c);
    });
    var cpu = sparkOf(root, "cpu", { unit: "%", range: [0, 100] });
    if (cpu) cpu.load(h.t, h.host_cpu_pct);
  }

  // --- deployment ---------------------------------------------------------------------------

  function deploymentTotals(data) {
    var procs = data.processes || [];
    var serving = procs.filter(function (p) { return p.role === "decode" || p.role === "single"; });
    var engines = procs.filter(function (p) { return p.role !== "router"; });
    return {
      // Requests being generated: the decode side of PD or the single server (a PD request
      // also passes through prefill; counting both would count it twice).
      running: sum(serving.map(function (p) { return p.engine ? p.engine.running : null; })),
      // Requests waiting anywhere before generation (prefill queue included).
      queued: sum(engines.map(function (p) { return p.engine ? p.engine.queued : null; }))
    };
  }

  // The router's own figures (its Prometheus port): requests routed per second, healthy workers
  // and 5xx answers per second, e.g. "router: 4.0 req/s · workers 2/2 healthy · 5xx 0.0/s".
  function routerLine(e) {
    var parts = [];
    if (isNum(e.req_s)) parts.push(e.req_s.toFixed(1) + " req/s");
    if (isNum(e.workers_total)) parts.push("workers " + e.workers_healthy + "/" + e.workers_total + " healthy");
    if (isNum(e.error_5xx_s)) parts.push("5xx " + e.error_5xx_s.toFixed(1) + "/s");
    return parts.length ? "router: " + parts.join(" · ") : "";
  }

  function processRow(root, p) {
    var row = root.querySelector('[data-process-id="' + p.id + '"]');
    if (row) return row;
    var tpl = root.querySelector("template[data-process-template]");
    var body = root.querySelector("tbody[data-processes]");
    if (!tpl || !body) return null;
    row = tpl.content.firstElementChild.cloneNode(true);
    row.setAttribute("data-process-id", p.id);
    var label = field(row, "label");
    if (label) label.textContent = p.role;
    body.appendChild(row);
    var empty = root.querySelector("[data-no-processes]");
    if (empty) empty.hidden = true;
    labelProcesses(root);
    return row;
  }

  // Rows added from a sample know only the role; the process list of the API gives the
  // ordinal, so they read "decode #0" like the rest of the page. At most one request a second.
  function labelProcesses(root) {
    var id = root.getAttribute("data-live-deployment");
    if (!id || root._labelling) return;
    root._labelling = true;
    setTimeout(function () {
      fetch("/api/processes/?deployment=" + encodeURIComponent(id) + "&limit=500",
            { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) {
          if (r.status === 401) CeilingLive.sessionEnded(401);
          return r.ok ? r.json() : null;
        })
        .then(function (body) {
          root._labelling = false;
          var rows = body && (body.results || body);
          if (!Array.isArray(rows)) return;
          rows.forEach(function (p) {
            var label = root.querySelector('[data-process-id="' + p.id + '"] [data-f="label"]');
            if (label) label.textContent = p.role + " #" + p.ordinal;
          });
        })
        .catch(function () { root._labelling = false; });
    }, 1000);
  }

  var TERMINAL = /^(stopped|failed|killed)$/;

  // The deployment's output chart on its page; with no tok/s figure yet it says so in words. An
  // engine without /metrics never gives one: the page says why (data-no-tok-s), never "yet".
  function outputSpark(root) {
    return sparkOf(root, "tok_s", {
      unit: "tok/s", axes: true, label: "output tok/s", height: 170,
      empty: function () {
        return root.getAttribute("data-no-tok-s") ||
          (root._ended ? "no tok/s recorded while it ran" : "no tok/s recorded yet");
      }
    });
  }

  function renderDeployment(root, data, sparks) {
    var t = data.t;
    // After a stop, only a sample that says so (the agent's final one) may still change the panel.
    if (root._ended && !TERMINAL.test(data.status || "")) return;
    root._sample = { t: t, interval: data.interval_s || 0.5 };
    // Why there is no output figure (e.g. llama.cpp has no /metrics), said where it is missing:
    // on the wall a tooltip cannot be read from across the room.
    var serving = (data.processes || []).filter(function (p) { return p.role === "decode" || p.role === "single"; });
    var naWhy = serving.map(function (p) { return (p.engine || {}).metrics_error; }).filter(Boolean)[0] || "";
    set(root, "tok_s", fixed(data.tok_s, 1), "tok/s", naWhy);
    var naLine = field(root, "na-reason");
    if (naLine) naLine.textContent = isNum(data.tok_s) || !naWhy ? "" : "no live figures: " + naWhy;
    var totals = deploymentTotals(data);
    set(root, "total_running", isNum(totals.running) ? Math.round(totals.running) : null, "");
    set(root, "total_queued", isNum(totals.queued) ? Math.round(totals.queued) : null, "");
    if (data.status) setBadge(field(root, "status"), statusText(root, data.status), statusClass(data.status));
    if (sparks) {
      var s = outputSpark(root);
      if (s) s.push(t, data.tok_s);
    }
    // Rows of processes missing from the newest sample (stale or foreign) go.
    var ids = (data.processes || []).map(function (p) { return String(p.id); });
    Array.prototype.forEach.call(root.querySelectorAll("tbody[data-processes] [data-process-id]"), function (row) {
      if (ids.indexOf(row.getAttribute("data-process-id")) < 0) row.remove();
    });
    (data.processes || []).forEach(function (p) {
      var row = processRow(root, p);
      if (!row) return;
      var e = p.engine || {};
      var reason = e.metrics_error || "";
      // A router has no token counters, KV cache or queue of its own: say so instead of a blank.
      var routerWhy = p.role === "router" && !reason ? "a router forwards its workers' tokens; see its line below" : "";
      // A health change is newer news than a sample taken from rows read up to 1 s earlier.
      var changed = row._healthChangeTs;
      if (!(typeof changed === "number" && t <= changed + 2) && !asLastSeen(root)) {
        setBadge(field(row, "health"), p.health || p.status || "unknown", healthClass(p.health || p.status));
      }
      set(row, "status", p.status || null, "");
      set(row, "gen_tok_s", fixed(e.gen_tok_s, 1), "tok/s", reason || routerWhy);
      set(row, "running", isNum(e.running) ? Math.round(e.running) : null, "", reason || (p.role === "router" && !reason ? "the router exports no live count of the requests it holds" : ""));
      set(row, "queued", isNum(e.queued) ? Math.round(e.queued) : null, "", reason || routerWhy);
      set(row, "kv", isNum(e.kv_usage) ? (e.kv_usage * 100).toFixed(0) : null, "%", reason || routerWhy);
      set(row, "gpumem", size(p.gpu_memory_bytes), "", p.gpu_memory_bytes === null ? "no GPU memory reported for this process" : "");
      set(row, "cpu", fixed(p.cpu_pct, 0), "%");
      set(row, "cpu_pinned", fixed(p.cpu_pct_pinned_set, 0), "%");
      set(row, "rss", size(p.rss_bytes), "");
      var err = field(row, "metrics_error");
      if (err) err.textContent = e.metrics_error ? "metrics: " + e.metrics_error : routerLine(e);
      if (sparks) {
        var sp = sparkOf(row, "gen_tok_s", { unit: "tok/s" });
        if (sp) sp.push(t, e.gen_tok_s);
      }
    });
    freshness(root, t, root._sample.interval);
  }

  function applyHealthChange(root, data, ts) {
    var item = root.querySelector('[data-process-id="' + data.process_id + '"]');
    if (!item || asLastSeen(root)) return;
    if (typeof ts === "number") item._healthChangeTs = ts;
    setBadge(field(item, "health"), data.to, healthClass(data.to));
    var detail = field(item, "health-detail");
    if (detail) {
      var text = data.detail || "";
      detail.textContent = text.length > 90 ? text.slice(0, 87) + "…" : text;
      detail.title = text;
    }
  }

  function deploymentHistory(root, body) {
    var h = body && body.history;
    if (!h || !h.t) return;
    var s = outputSpark(root);
    if (s) s.load(h.t, h.tok_s);
    var procs = h.processes || {};
    Object.keys(procs).forEach(function (pid) {
      var row = root.querySelector('tr[data-process-id="' + pid + '"]');
      var sp = row && sparkOf(row, "gen_tok_s", { unit: "tok/s" });
      if (sp) sp.load(h.t, procs[pid].gen_tok_s);
    });
  }

  // Ask htmx to re-fetch the server-rendered live part (status, health, timeline) now instead
  // of at its next 2 s poll.
  function refreshHtmx(selector) {
    var el = document.querySelector(selector);
    if (!el || typeof htmx === "undefined" || !el.getAttribute("hx-get")) return;
    var values = {};
    try { values = JSON.parse(el.getAttribute("hx-vals") || "{}"); } catch (err) { values = {}; }
    htmx.ajax("GET", el.getAttribute("hx-get"), { source: el, target: el, swap: "outerHTML", values: values });
  }

  // --- stored telemetry of a past deployment -----------------------------------------------

  function drawHistoryCharts(root, body) {
    var holder = root.querySelector("[data-history-charts]");
    var note = field(root, "history-note");
    var h = body && body.history;
    if (!holder) return;
    if (!h || !h.t || !h.t.length) {
      if (note) note.textContent = "No stored telemetry for this deployment.";
      return;
    }
    if (note) note.textContent = h.t.length + " stored samples, " + CeilingLive.clock(h.t[0]) + " – " + CeilingLive.clockUtc(h.t[h.t.length - 1]) + " (1 s rollups: tok/s is the mean rate over each second, so summed over the seconds it gives the tokens; running and queued requests are the mean of the samples of that second, so a request shorter than the sampling interval can be missed and 0.5 means one was seen in half of them).";
    // A chart without a value is left out, unless it has an ``empty`` line to show instead.
    function chart(title, ts, vs, unit, color, empty) {
      if (!empty && (!vs || !vs.some(isNum))) return;
      var box = document.createElement("div");
      box.className = "history-chart";
      var h3 = document.createElement("h3");
      h3.textContent = title;
      var plot = document.createElement("div");
      box.appendChild(h3);
      box.appendChild(plot);
      holder.appendChild(box);
      var s = new Spark(plot, { unit: unit, axes: true, label: title, height: 160, color: color, windowS: 1e12,
                                empty: empty });
      s.load(ts, vs || []);
    }
    chart("Output (tok/s)", h.t, h.tok_s, "tok/s", undefined,
          root.getAttribute("data-no-tok-s") || "no tok/s recorded while it ran");
    var labels = {};
    Array.prototype.forEach.call(root.querySelectorAll("[data-process-label]"), function (el) {
      labels[el.getAttribute("data-process-label")] = el.textContent;
    });
    var procs = h.processes || {};
    Object.keys(procs).forEach(function (pid) {
      var p = procs[pid];
      var who = labels[pid] || "process " + pid;
      chart(who + ": generation (tok/s)", h.t, p.gen_tok_s, "tok/s", "#009E73");
      chart(who + ": running requests", h.t, p.running, "", "#E69F00");
      chart(who + ": queued requests", h.t, p.queued, "", "#CC79A7");
      chart(who + ": KV cache usage (%)", h.t, (p.kv_usage || []).map(function (v) { return isNum(v) ? v * 100 : null; }), "%", "#D55E00");
      chart(who + ": GPU memory (GiB)", h.t, (p.gpu_memory_bytes || []).map(function (v) { return isNum(v) ? v / GIB : null; }), "GiB", "#56B4E9");
      chart(who + ": CPU (%)", h.t, p.cpu_pct, "%", "#0072B2");
    });
    if (!holder.children.length && note) note.textContent = "No stored telemetry for this deployment.";
  }

  function initHistory(root) {
    var id = root.getAttribute("data-telemetry-history");
    var since = root.getAttribute("data-since");
    var url = "/api/deployments/" + encodeURIComponent(id) + "/telemetry/" + (since ? "?since=" + encodeURIComponent(since) : "");
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        if (r.status === 401) CeilingLive.sessionEnded(401);
        if (!r.ok) throw new Error(r.status === 401 ? "signed out" : "HTTP " + r.status);
        return r.json();
      })
      .then(function (body) { drawHistoryCharts(root, body); })
      .catch(function (err) {
        var note = field(root, "history-note");
        if (note) note.textContent = "Stored telemetry could not be loaded (" + err.message + ").";
      });
  }

  // --- sweep --------------------------------------------------------------------------------

  // Requests a stop (the cancel, the deployment going down) ended in flight: neither done nor
  // failed, shown apart and only when there are some.
  function showAborted(root, aborted) {
    var some = isNum(aborted) && aborted > 0;
    var label = field(root, "aborted-label"), value = field(root, "aborted");
    if (label) label.hidden = !some;
    if (value) value.hidden = !some;
    if (some) set(root, "aborted", aborted, "aborted");
  }

  function renderSweepProgress(root, data) {
    root.hidden = false;
    var total = data.total, done = data.done;
    set(root, "point", isNum(data.point_index) && isNum(data.points_total)
      ? (data.point_index + 1) + " of " + data.points_total + (data.point ? " · " + data.point : "") : null, "");
    // The status block above hides its running point line while this panel shows: its link is here.
    var runLink = field(root, "run-link");
    if (runLink && isNum(data.run_id)) {
      runLink.href = "/benchmarks/runs/" + encodeURIComponent(data.run_id) + "/";
      runLink.hidden = false;
    }
    // A closed loop limited by time cannot know its total: "total" is the requests sent so far.
    var sentSoFar = data.total_sent_so_far === true;
    // While the point's prompts are built (before any request) "total" counts prompts, not requests;
    // while its warm-up requests run (phase "warming up") warmup_done / warmup_total count those,
    // which are never the point's requests done.
    if (data.phase) {
      if (isNum(data.warmup_total)) {
        var warmDone = isNum(data.warmup_done) ? data.warmup_done : 0;
        set(root, "requests", data.phase + ": " + warmDone + " / " + data.warmup_total + " warm-up requests"
          + (isNum(data.warmup_elapsed_s) ? ", " + data.warmup_elapsed_s.toFixed(1) + " s elapsed" : ""), "");
        bar(field(root, "fill"), data.warmup_total > 0 ? warmDone / data.warmup_total : null);
      } else {
        set(root, "requests", data.phase + ": " + (isNum(data.prepared) ? data.prepared : 0) + " / "
          + (isNum(total) ? total : "—"), "prompts");
        bar(field(root, "fill"), isNum(data.prepared) && isNum(total) && total > 0 ? data.prepared / total : null);
      }
      // No request was sent yet: a rate, failure count or elapsed time shown is an earlier point's.
      ["failed", "tok_s", "tok_s_mean", "elapsed"].forEach(function (name) { set(root, name, "—", ""); });
      showAborted(root, null);
      var phaseLabel = field(root, "tok_s-label");
      if (phaseLabel) phaseLabel.textContent = "Output tok/s, last " + (root.getAttribute("data-tok-window-s") || "0.5") + " s window";
      var ageP = field(root, "sample-age");
      if (ageP) ageP.textContent = CeilingLive.clockUtc(progressTime(data) || new Date());
      return;
    }
    set(root, "requests", isNum(done) && isNum(total)
      ? (sentSoFar ? done + " done of " + total + " sent so far, time-limited" : done + " / " + total) : null,
      sentSoFar ? "" : "requests");
    set(root, "failed", isNum(data.failed) ? data.failed : null, "failed");
    showAborted(root, data.aborted);
    // Two output rates, each named: the last report window's (tok_s; its length in seconds is the
    // section's data-tok-window-s) and the mean since the point's first request (tok_s_mean, null
    // before any token), which the point's stored output throughput approaches.
    var windowS = root.getAttribute("data-tok-window-s") || "0.5";
    set(root, "tok_s", fixed(data.tok_s, 1), "tok/s");
    var tokLabel = field(root, "tok_s-label");
    if (tokLabel) tokLabel.textContent = "Output tok/s, last " + windowS + " s window";
    set(root, "tok_s_mean", fixed(data.tok_s_mean, 1), "tok/s", "no output token yet");
    // A time-limited point ends by its duration (its request total is only a budget).
    set(root, "elapsed", isNum(data.elapsed_s) ? data.elapsed_s.toFixed(1) + (isNum(data.duration_s) ? " / " + data.duration_s : "") : null, "s");
    bar(field(root, "fill"), sentSoFar
      ? (isNum(data.elapsed_s) && isNum(data.duration_s) && data.duration_s > 0 ? data.elapsed_s / data.duration_s : null)
      : (isNum(done) && isNum(total) && total > 0 ? done / total : null));
    root._sample = { t: Date.now() / 1000, interval: 1 };
    var age = field(root, "sample-age");
    if (age) age.textContent = CeilingLive.clockUtc(progressTime(data) || new Date())
      + (data.source === "server_counters" ? " (from the servers' counters)" : " (counted by the load generator)");
  }

  // The status block's sweep-wide request count and bar come from the rows, which may lag the
  // newest report by a second or more: raise them to that report's (root._latest) when it is
  // ahead. Both only grow while a sweep runs, so the larger of the two is the newer; a block whose
  // rows are ahead (a point just stored) keeps its own.
  function syncSweepStatus(root) {
    var data = root._latest;
    if (!data || root._ended) return;
    var block = document.querySelector("#sweep-progress");
    if (!block) return;
    var cell = block.querySelector("[data-sweep-requests-done]");
    var rows = cell ? parseInt(cell.getAttribute("data-sweep-requests-done"), 10) : NaN;
    var done = isNum(data.requests_done) && isNum(rows) && data.requests_done > rows ? data.requests_done : null;
    var text = cell && cell.firstChild && cell.firstChild.nodeType === 3 ? cell.firstChild : null;
    if (done !== null && text && /^\d+/.test(text.nodeValue)) text.nodeValue = text.nodeValue.replace(/^\d+/, String(done));
    var barBox = block.querySelector("[data-sweep-bar]");
    if (!barBox) return;
    var pct = null;
    var pointsDone = parseInt(barBox.getAttribute("data-points-done"), 10);
    var pointsTotal = parseInt(barBox.getAttribute("data-points-total"), 10);
    var requestsTotal = parseInt(barBox.getAttribute("data-requests-total"), 10);
    if (barBox.hasAttribute("data-timed") && pointsTotal > 0 && data.point_index === pointsDone && !data.phase) {
      // As the server computes it: finished points plus the running point's share.
      var shares = [0];
      if (data.total_sent_so_far !== true && isNum(data.done) && isNum(data.total) && data.total > 0) shares.push(data.done / data.total);
      if (isNum(data.elapsed_s) && isNum(data.duration_s) && data.duration_s > 0) shares.push(data.elapsed_s / data.duration_s);
      pct = 100 * (pointsDone + Math.min(1, Math.max.apply(null, shares))) / pointsTotal;
    } else if (requestsTotal > 0 && done !== null) {
      pct = 100 * done / requestsTotal;
    }
    var rowsPct = parseFloat(barBox.getAttribute("data-percent"));
    if (pct === null || !(pct > rowsPct)) return;
    pct = Math.min(100, pct);
    barBox.setAttribute("aria-valuenow", pct.toFixed(1));
    var fill = barBox.querySelector(".progress-bar");
    if (fill) fill.style.width = pct.toFixed(1) + "%";
  }

  // When a sweep.progress report was made (its updated_at, a Date), or null for one without it.
  function progressTime(data) {
    var t = data && typeof data.updated_at === "string" ? Date.parse(data.updated_at) : NaN;
    return isNum(t) ? new Date(t) : null;
  }

  // Draw a progress report unless the panel already shows a newer one: the messages and the copy
  // of the last one embedded in the polled status block (#sweep-progress-message, written from
  // the same rows a reload renders) are one source, and whichever is newest is what is shown.
  function showSweepProgress(root, data) {
    var t = progressTime(data);
    if (t && root._shownAt && t < root._shownAt) return;
    if (t) root._shownAt = t;
    root._latest = data;
    renderSweepProgress(root, data);
    syncSweepStatus(root);
  }

  function embeddedSweepProgress() {
    var el = document.querySelector("#sweep-progress-message");
    if (!el) return null;
    try { return JSON.parse(el.textContent); } catch (err) { return null; }
  }

  function initSweep(root) {
    var id = root.getAttribute("data-live-sweep");
    var group = "sweep-" + id;
    // The page as rendered (or reloaded) shows its stored report at once; each re-fetch of the
    // status block brings the rows' latest, drawn when no newer message came first.
    var embedded = embeddedSweepProgress();
    if (embedded) showSweepProgress(root, embedded);
    // htmx:afterSwap, not htmx:load: it comes in the same task as the swap, before the browser
    // paints the block, whose rows may be behind what the page shows (htmx:load waits for the settle).
    document.addEventListener("htmx:afterSwap", function (event) {
      if (!event.target || event.target.id !== "sweep-progress") return;
      var stored = embeddedSweepProgress();
      if (stored && !root._ended) showSweepProgress(root, stored);
      // The block just drawn holds the rows' counts: the newest report's, when ahead, go back in.
      syncSweepStatus(root);
    });
    CeilingLive.open({
      groups: [group],
      notBefore: CeilingLive.notBefore(root, group),
      onMessage: function (msg, meta) {
        var badge = field(root, "status");
        if (msg.type === "sweep.progress") {
          if (!meta.replayed || msg.data.done !== msg.data.total) showSweepProgress(root, msg.data);
          if (badge && !/^(done|failed|cancelled)$/.test(badgeText(badge))) setBadge(badge, "running", "warn");
        } else if (msg.type === "sweep.point" && msg.data.summary) {
          // The point is stored: its measured result replaces the windowed live rate.
          set(root, "tok_s", fixed(msg.data.summary.output_tok_s, 1), "tok/s");
          var stored = field(root, "tok_s-label");
          if (stored) stored.textContent = "Output of " + (msg.data.summary.label || "the point") + " (stored result)";
        } else if (msg.type === "sweep.status") {
          setBadge(badge, msg.data.status, statusClass(msg.data.status) || (msg.data.status === "done" ? "ok" : ""));
          // Ended: the status panel above (reloaded next) holds the final counts; a second,
          // frozen copy of them here would only repeat it.
          if (/^(done|failed|cancelled)$/.test(msg.data.status) && !meta.replayed) { root.hidden = true; root._ended = true; }
          // Done: its what-if projection (rendered hidden while it ran, for a role that may use
          // it) can be opened now, without a reload. A failed or cancelled sweep may have no
          // point to project: the progress partial, reloaded below, sends its link or the reason.
          if (msg.data.status === "done") {
            Array.prototype.forEach.call(document.querySelectorAll("[data-whatif-link]"), function (a) {
              a.hidden = false;
            });
          }
        }
        if ((msg.type === "sweep.point" || msg.type === "sweep.status") && !meta.replayed) {
          // A point finished or the sweep changed state: the results (table, charts, findings)
          // and the status line reload from the server.
          if (typeof htmx !== "undefined") htmx.trigger(document.body, "sweep-points-changed");
          refreshHtmx("#sweep-progress");
        }
      },
      // Every (re)connect fetches /api/sweeps/<id>/: its progress is the running point's last
      // report as the rows hold it (the message the socket carried, or one it missed while
      // down), drawn under the same rule as a message, never over a newer one.
      onHistory: function (g, body) {
        if (g !== group || !body || !body.progress || root._ended) return;
        showSweepProgress(root, body.progress);
      }
    });
  }

  // --- node page ----------------------------------------------------------------------------

  function initNode(root) {
    var group = root.getAttribute("data-group");
    CeilingLive.open({
      groups: [group],
      // A message older than the node (its data-created) was about an earlier node of that name.
      notBefore: CeilingLive.notBefore(root, group),
      onMessage: function (msg) { if (msg.type === "node.sample") renderNode(root, msg.data, true); },
      onHistory: function (g, body) { nodeHistory(root, body); }
    });
    setInterval(function () { var s = root._sample; freshness(root, s && s.t, s && s.interval); }, TICK_MS);
  }

  // --- deployment page ----------------------------------------------------------------------

  // A deployment that ended with no process row on the panel never had a sample and never will:
  // the "rows appear with the first sample" line says so instead of promising one.
  function endedBeforeSample(root, status) {
    var empty = root.querySelector("[data-no-processes]");
    if (!empty || empty.hidden || root.querySelector("tbody[data-processes] [data-process-id]")) return;
    empty.textContent = "The deployment " + (status === "stopped" ? "was stopped" : "ended " + status) +
      " before any sample was taken; no rows will appear.";
  }

  function initDeployment(root) {
    var group = root.getAttribute("data-group");
    CeilingLive.open({
      groups: [group],
      onMessage: function (msg, meta) {
        if (msg.type === "deployment.sample") renderDeployment(root, msg.data, true);
        else if (msg.type === "health.change") { applyHealthChange(root, msg.data, msg.ts); if (!meta.replayed) refreshHtmx("#deployment-live"); }
        else if (msg.type === "deployment.status") {
          var st = msg.data.status;
          setBadge(field(root, "status"), st, statusClass(st));
          root._ended = TERMINAL.test(st || "") ? st : null;
          if (root._ended) {
            // Nothing runs any more: say so on every row until the final sample fills in the rest.
            Array.prototype.forEach.call(root.querySelectorAll("tbody[data-processes] [data-process-id]"), function (row) {
              var h = field(row, "health");
              if (h && !/^(failed|stopped)$/.test(badgeText(h))) setBadge(h, "stopped", "");
            });
            set(root, "tok_s", null, "", "the deployment is " + st);
            set(root, "total_running", null, "", "the deployment is " + st);
            set(root, "total_queued", null, "", "the deployment is " + st);
            endedBeforeSample(root, st);
            // Its output chart's line, if it has no figure, now says the run is over.
            var out = outputSpark(root);
            if (out) out.draw();
          }
          if (!meta.replayed) refreshHtmx("#deployment-live");
        }
      },
      notBefore: CeilingLive.notBefore(root, group),
      onHistory: function (g, body) { deploymentHistory(root, body); }
    });
    setInterval(function () { var s = root._sample; freshness(root, s && s.t, s && s.interval); }, TICK_MS);
  }

  // --- wall ---------------------------------------------------------------------------------

  // Whether a wall tile takes a live message: not one older than the tile's object (its
  // data-created), which was about another object that had the same id or name. The tiles
  // change under one socket, so the rule is applied per tile rather than by notBefore.
  function wallAccepts(tile, msg) { return CeilingLive.accepts(tile, msg); }

  function initWall(root) {
    var latest = {};   // group -> {type: data}
    var latestTs = {}; // group -> {type: ts}
    function tiles() { return root.querySelector("[data-wall-tiles]"); }
    function groupsOnWall() {
      return Array.prototype.map.call(tiles().querySelectorAll("[data-group]"), function (el) { return el.getAttribute("data-group"); });
    }
    function tileOf(group) { return tiles().querySelector('[data-group="' + group + '"]'); }
    function render(group) {
      var tile = tileOf(group);
      if (!tile || !latest[group]) return;
      // Tiles swapped in since (a new object with this group) take only what is not older.
      var seen = {};
      Object.keys(latest[group]).forEach(function (type) {
        if (wallAccepts(tile, { ts: (latestTs[group] || {})[type] })) seen[type] = latest[group][type];
      });
      if (seen["node.sample"]) renderNode(tile, seen["node.sample"], false);
      if (seen["deployment.sample"]) renderDeployment(tile, seen["deployment.sample"], false);
      if (seen["deployment.status"]) setBadge(field(tile, "status"), statusText(tile, seen["deployment.status"].status), statusClass(seen["deployment.status"].status));
      (seen["health.change"] ? [seen["health.change"]] : []).forEach(function (d) { applyHealthChange(tile, d); });
    }
    // The nodes' roster group names no node: subscribed for as long as the wall is open, it
    // tells of a node registered or removed, or whose agent came online, even one that did not
    // exist when the wall subscribed.
    var rosterGroup = root.getAttribute("data-roster-group");
    var live = CeilingLive.open({
      groups: groupsOnWall().concat(rosterGroup ? [rosterGroup] : []),
      onMessage: function (msg) {
        // A deployment on a node of the wall was created or changed status, or the set of nodes
        // or an agent's state changed: redraw the tiles now rather than at the next 10 s re-fetch.
        if (msg.type === "deployment.roster" || msg.type === "node.roster") { refreshSoon(); return; }
        if (!wallAccepts(tileOf(msg.group), msg)) return;
        (latest[msg.group] = latest[msg.group] || {})[msg.type] = msg.data;
        (latestTs[msg.group] = latestTs[msg.group] || {})[msg.type] = msg.ts;
        if (msg.type === "deployment.status") {
          var s = latest[msg.group]["deployment.sample"];
          if (s) s.status = msg.data.status;
        }
        render(msg.group);
      }
    });
    // New deployments and nodes appear (and ended ones go) without a reload: the tiles are
    // re-fetched at once on a deployment.roster message of a node's group or a node.roster one
    // of the nodes' roster group, and every 10 s whatever comes (the fallback for a lost
    // message), swapped in when the
    // roster changed, and the socket's subscriptions follow. It is a partial request (HX-Request): signed out, the server
    // answers 401 instead of the login page, and the wall says "signed out".
    var url = root.getAttribute("data-tiles-url");
    function refreshRoster() {
      fetch(url, { credentials: "same-origin", cache: "no-store", headers: { "HX-Request": "true" } })
        .then(function (r) {
          if (r.status === 401 || CeilingLive.isLoginRedirect(r)) {
            CeilingLive.sessionEnded(401, r.headers.get("Ceiling-Login-URL"));
            return null;
          }
          if (r.ok && !r.redirected) serverAnswered();
          return r.ok && !r.redirected ? r.text() : null;
        })
        .then(function (html) {
          if (!html) return;
          var doc = new DOMParser().parseFromString(html, "text/html");
          var fresh = doc.querySelector("[data-wall-tiles]");
          var current = tiles();
          if (!fresh || fresh.getAttribute("data-roster") === current.getAttribute("data-roster")) return;
          var before = groupsOnWall();
          current.replaceWith(document.importNode(fresh, true));
          var after = groupsOnWall();
          live.unsubscribe(before.filter(function (g) { return after.indexOf(g) < 0; }));
          live.subscribe(after.filter(function (g) { return before.indexOf(g) < 0; }));
          after.forEach(render);
        })
        .catch(function () { /* server away: the status line already says so */ });
    }
    // Roster messages arriving together (a deploy's created and starting, one per node after a
    // reconnect) cost one re-fetch.
    var refreshTimer = null;
    function refreshSoon() {
      if (refreshTimer) return;
      refreshTimer = setTimeout(function () { refreshTimer = null; refreshRoster(); }, 200);
    }
    setInterval(refreshRoster, 10000);
    // The wall has no poll of its own that a restarted server answers within seconds (the re-fetch
    // above comes every 10 s): while it is not live, it asks the server a light question every
    // SERVER_PROBE_MS (one node of GET /api/nodes/, as the signed-in viewer), and the first 2xx
    // answer tells live.js that the server is back ("ceiling:server-answered"), which retries a
    // socket waiting out its back-off at once, as the other pages' polls do. A server still away
    // answers nothing; signed out, the answer is a 401 and the wall says "signed out"; without the
    // viewer role any more, a 403 and it says "no access", as the live client's session check does.
    function serverAnswered() { document.dispatchEvent(new CustomEvent("ceiling:server-answered")); }
    function probeServer() {
      if (live.state !== "reconnecting") return;
      fetch("/api/nodes/?limit=1", { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } })
        .then(function (r) {
          if (r.status === 401 || CeilingLive.isLoginRedirect(r)) {
            CeilingLive.sessionEnded(401, r.headers.get("Ceiling-Login-URL"));
          } else if (r.status === 403) {
            live.sessionEnded(true);
            CeilingLive.sessionEnded(403, null);
          } else if (r.ok && !r.redirected) {
            serverAnswered();
          }
        })
        .catch(function () { /* still away: the status line says so */ });
    }
    setInterval(probeServer, SERVER_PROBE_MS);
    var clockEl = root.querySelector("[data-wall-clock]");
    if (clockEl) clockEl.textContent = CeilingLive.clockUtc(new Date());
    setInterval(function () {
      if (clockEl) clockEl.textContent = CeilingLive.clockUtc(new Date());
      Array.prototype.forEach.call(tiles().querySelectorAll("[data-group]"), function (tile) {
        var s = tile._sample;
        freshness(tile, s && s.t, s && s.interval);
        // No recent sample (the agent died, or the socket is down): the status badge greys out
        // like the health badges, and says since when it has not been confirmed.
        var stale = tile.classList.contains("sample-stale");
        var since = stale ? (s && isNum(s.t) ? "no sample since " + CeilingLive.clockUtc(s.t) : "no sample yet") : "";
        // The process health badges too, and a node's "agent online": a green badge the agent can
        // no longer confirm would read as a live fact on a wall seen from across the room (a red
        // "agent offline" stays red: no sample is what it says).
        var badges = Array.prototype.slice.call(tile.querySelectorAll('[data-f="health"]'));
        var badge = field(tile, "status");
        if (badge) badges.push(badge);
        var agent = field(tile, "agent");
        if (agent && agent.classList.contains("ok")) badges.push(agent);
        badges.forEach(function (b) {
          b.classList.toggle("unconfirmed", stale);
          b.title = since;
        });
      });
    }, TICK_MS);
  }

  function init() {
    if (typeof CeilingLive === "undefined") return;
    Array.prototype.forEach.call(document.querySelectorAll("[data-live-node]"), initNode);
    Array.prototype.forEach.call(document.querySelectorAll("[data-live-deployment]"), initDeployment);
    Array.prototype.forEach.call(document.querySelectorAll("[data-telemetry-history]"), initHistory);
    Array.prototype.forEach.call(document.querySelectorAll("[data-live-sweep]"), initSweep);
    Array.prototype.forEach.call(document.querySelectorAll("[data-wall]"), initWall);
  }

  window.CeilingDashboards = { renderNode: renderNode, renderDeployment: renderDeployment, deploymentTotals: deploymentTotals,
                               wallAccepts: wallAccepts };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
