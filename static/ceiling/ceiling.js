// Small page helpers shared by every page: copy-to-clipboard buttons, the CSRF header for
// htmx requests (Django rejects unsafe requests without it), confirmation of destructive
// forms, log tails that follow new output, wide tables that say where their hidden columns
// are, and the signed-out state of a page whose session ended while it was open.
(function () {
  "use strict";

  function csrfToken() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute("content") : "";
  }

  document.addEventListener("htmx:configRequest", function (event) {
    event.detail.headers["X-CSRFToken"] = csrfToken();
  });

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy-target]");
    if (!button) return;
    var source = document.getElementById(button.getAttribute("data-copy-target"));
    if (!source || !navigator.clipboard) return;
    navigator.clipboard.writeText(source.textContent).then(function () {
      var label = button.textContent;
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = label; }, 1200);
    });
  });

  // Forms that stop or cancel something ask first; the server still decides.
  document.addEventListener("submit", function (event) {
    var form = event.target.closest("form[data-confirm]");
    if (form && !window.confirm(form.getAttribute("data-confirm"))) event.preventDefault();
  });

  // Log tails are replaced every poll. Follow the end like `tail -f`, but a reader who
  // scrolled up keeps their place, so the old scroll state is noted before each swap.
  var NEAR_BOTTOM_PX = 24;
  var logScroll = {};

  function logTails(root) {
    if (!root || !root.querySelectorAll) return [];
    var found = Array.prototype.slice.call(root.querySelectorAll("pre.log-tail[id]"));
    if (root.matches && root.matches("pre.log-tail[id]")) found.push(root);
    return found;
  }

  function placeLogTails(root) {
    logTails(root).forEach(function (pre) {
      var before = logScroll[pre.id];
      delete logScroll[pre.id];
      pre.scrollTop = before && !before.atBottom ? before.top : pre.scrollHeight;
    });
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    logTails(event.detail.target).forEach(function (pre) {
      logScroll[pre.id] = {
        atBottom: pre.scrollHeight - pre.scrollTop - pre.clientHeight <= NEAR_BOTTOM_PX,
        top: pre.scrollTop
      };
    });
  });

  document.addEventListener("htmx:load", function (event) { placeLogTails(event.detail.elt); });
  document.addEventListener("DOMContentLoaded", function () { placeLogTails(document); });

  // --- wide tables -------------------------------------------------------------------------
  // A table wider than its scroll box (.table-scroll) says where its hidden columns are: the box
  // gets data-overflow="left", "right" or "left right" (ceiling.css fades that edge), kept up to
  // date as it is scrolled, as the window or the table changes size (live rows, htmx swaps).
  var EDGE_PX = 1;

  function markOverflow(box) {
    var max = box.scrollWidth - box.clientWidth;
    var sides = [];
    if (max > EDGE_PX && box.scrollLeft > EDGE_PX) sides.push("left");
    if (max > EDGE_PX && box.scrollLeft < max - EDGE_PX) sides.push("right");
    if (sides.length) box.setAttribute("data-overflow", sides.join(" "));
    else box.removeAttribute("data-overflow");
    placeRail(box, max > EDGE_PX);
  }

  // A box whose table is cut off gets a scroll bar of its own, always drawn (.scroll-rail, pinned
  // to the box's bottom edge): the browser's bar is an overlay on macOS and in headless browsers,
  // invisible until one scrolls, so the cut-off columns read as the table's end. Its thumb shows
  // the part in view; dragging it or clicking the rail scrolls the box (wheel, touch and keyboard
  // scroll the box as before).
  function placeRail(box, wide) {
    var rail = box.querySelector(":scope > .scroll-rail");
    if (!wide) {
      if (rail) rail.hidden = true;
      return;
    }
    if (!rail) {
      rail = document.createElement("div");
      rail.className = "scroll-rail";
      rail.setAttribute("aria-hidden", "true");
      rail.title = "more columns: drag, or scroll sideways (Shift + wheel)";
      rail.appendChild(document.createElement("div")).className = "scroll-thumb";
      box.appendChild(rail);
      rail.addEventListener("pointerdown", function (event) { railDrag(box, rail, event); });
    }
    rail.hidden = false;
    rail.style.width = box.clientWidth + "px";
    var thumb = rail.firstChild;
    thumb.style.width = (100 * box.clientWidth / box.scrollWidth) + "%";
    thumb.style.left = (100 * box.scrollLeft / box.scrollWidth) + "%";
  }

  function railDrag(box, rail, event) {
    event.preventDefault();
    var perPx = box.scrollWidth / rail.clientWidth;
    if (event.target === rail) {  // a click beside the thumb centres the view there
      var x = event.clientX - rail.getBoundingClientRect().left;
      box.scrollLeft = x * perPx - box.clientWidth / 2;
    }
    var startX = event.clientX, startLeft = box.scrollLeft;
    function move(e) { box.scrollLeft = startLeft + (e.clientX - startX) * perPx; }
    function up() {
      document.removeEventListener("pointermove", move);
      document.removeEventListener("pointerup", up);
    }
    document.addEventListener("pointermove", move);
    document.addEventListener("pointerup", up);
  }

  var boxSizes = typeof ResizeObserver !== "undefined" ? new ResizeObserver(function (entries) {
    entries.forEach(function (entry) {
      var box = entry.target.closest(".table-scroll");
      if (box) markOverflow(box);
    });
  }) : null;

  // Every table of the page's content scrolls inside a box of its own, so a wide table never
  // widens the page: one not in a .table-scroll yet (the process table, the lists) is wrapped in
  // one. Chart legends (uPlot draws them as tables) are left as they are.
  function boxTables(root) {
    var tables = Array.prototype.slice.call(root.querySelectorAll("main table"));
    if (root.matches && root.matches("main table")) tables.push(root);
    tables.forEach(function (table) {
      if (table.classList.contains("u-legend") || table.closest(".table-scroll, .uplot, [data-spark], td")) return;
      var box = document.createElement("div");
      box.className = "table-scroll";
      table.parentNode.insertBefore(box, table);
      box.appendChild(table);
    });
  }

  // The boxes in (or around: a table swapped into its box) root; observing a box or table again
  // is a no-op.
  function watchTables(root) {
    if (!root || !root.querySelectorAll) return;
    boxTables(root);
    var boxes = Array.prototype.slice.call(root.querySelectorAll(".table-scroll"));
    var around = root.closest ? root.closest(".table-scroll") : null;
    if (around) boxes.push(around);
    boxes.forEach(function (box) {
      markOverflow(box);
      if (!boxSizes) return;
      boxSizes.observe(box);
      if (box.firstElementChild) boxSizes.observe(box.firstElementChild);
    });
  }

  // Scroll events do not bubble; captured on the document they are seen for every box.
  document.addEventListener("scroll", function (event) {
    var box = event.target;
    if (box && box.classList && box.classList.contains("table-scroll")) markOverflow(box);
  }, true);
  document.addEventListener("htmx:load", function (event) { watchTables(event.detail.elt); });
  document.addEventListener("DOMContentLoaded", function () { watchTables(document); });
  window.addEventListener("resize", function () { watchTables(document); });

  // --- signed out while the page is open ------------------------------------------------
  // The server answers a partial request of a signed-out session (logged out in another tab,
  // expired) with 401 and the login URL for this page in Ceiling-Login-URL, and one whose
  // role no longer allows it with 403 (controlplane/middleware.py). htmx swaps neither (4xx is
  // an error in htmx.config.responseHandling, and the answers say HX-Reswap: none). The page
  // then says so once, with a link to log in that comes back here, and its polls pause: one
  // poll every SESSION_PROBE_MS goes through as a probe, and the first one answered 2xx (a
  // login elsewhere) clears the state and lets them all run again. A poll that was still sent
  // the old way and followed a redirect to the login page is never swapped in either.
  //
  // Other scripts report the same through a "ceiling:session-ended" event on document,
  // detail {status: 401 | 403, loginUrl: string | null}; live.js listens to it too, and sends
  // "ceiling:session-back" once its socket is accepted again, which clears the state too.
  var SESSION_PROBE_MS = 30000;
  var session = { state: "ok", lastProbe: 0 };

  function loginPath() {
    var meta = document.querySelector('meta[name="login-url"]');
    return meta ? meta.getAttribute("content") : "/login/";
  }

  function loginUrlForPage() {
    return loginPath() + "?next=" + encodeURIComponent(window.location.pathname + window.location.search);
  }

  function isLoginPage(url) {
    if (!url) return false;
    try { return new URL(url, window.location.href).pathname === loginPath(); } catch (err) { return false; }
  }

  function sessionNotice() {
    var notice = document.querySelector("[data-session-state]");
    if (notice) return notice;
    notice = document.createElement("ul");
    notice.className = "messages";
    notice.setAttribute("data-session-state", "");
    notice.setAttribute("role", "alert");
    notice.style.cssText = "position: sticky; top: 0; z-index: 20;";
    notice.appendChild(document.createElement("li")).className = "error";
    var main = document.querySelector("main") || document.body;
    main.insertBefore(notice, main.firstChild);
    return notice;
  }

  // A page's "updates every N s" line ([data-live-cadence]) says the updates stopped while the
  // session is gone, and gets its words back when it returns (a swap re-renders it too).
  // A line inside a stale part of the page (see "status that stops updating" below) says since
  // when instead; the session's words win, as they say why.
  function paintCadence(root) {
    var signedOut = session.state === "ok" ? null
      : "updates stopped (" + (session.state === "forbidden" ? "no access" : "signed out") + ")";
    var els = (root || document).querySelectorAll ? (root || document).querySelectorAll("[data-live-cadence]") : [];
    Array.prototype.forEach.call(els, function (el) {
      var scope = el.closest("[data-stale-since]");
      var stopped = signedOut
        || (scope ? "not updating: stale since " + clockUtc(new Date(+scope.getAttribute("data-stale-since"))) : null);
      if (stopped) {
        if (!el.hasAttribute("data-cadence-text")) el.setAttribute("data-cadence-text", el.textContent);
        el.textContent = stopped;
        el.setAttribute("data-stopped", "");
      } else if (el.hasAttribute("data-cadence-text")) {
        el.textContent = el.getAttribute("data-cadence-text");
        el.removeAttribute("data-cadence-text");
        el.removeAttribute("data-stopped");
      }
    });
  }
  document.addEventListener("htmx:load", function (event) { if (session.state !== "ok") paintCadence(event.detail.elt); });

  function showSessionEnded(status, loginUrl) {
    var state = status === 403 ? "forbidden" : "signed-out";
    session.state = state;
    session.lastProbe = Date.now();
    document.documentElement.setAttribute("data-session", state);
    paintCadence(document);
    var item = sessionNotice().firstChild;
    item.textContent = "";
    if (state === "forbidden") {
      item.appendChild(document.createTextNode(
        "No access: your role no longer allows this page's updates, so what it shows is no longer updated (ask an admin, then reload)."));
      return;
    }
    item.appendChild(document.createTextNode(
      "Signed out (in another tab, or the session expired): what this page shows is no longer updated. "));
    var link = item.appendChild(document.createElement("a"));
    link.href = loginUrl || loginUrlForPage();
    link.textContent = "Log in again";
  }

  function sessionBack() {
    if (session.state === "ok") return;
    session.state = "ok";
    document.documentElement.removeAttribute("data-session");
    paintCadence(document);
    var notice = document.querySelector("[data-session-state]");
    if (notice) notice.parentNode.removeChild(notice);
  }

  function sessionEnded(status, loginUrl) {
    document.dispatchEvent(new CustomEvent("ceiling:session-ended", { detail: { status: status, loginUrl: loginUrl || null } }));
  }

  document.addEventListener("ceiling:session-ended", function (event) {
    var detail = event.detail || {};
    showSessionEnded(detail.status, detail.loginUrl);
  });

  // The live socket was accepted again (live.js): the user is signed in with a role that reads.
  document.addEventListener("ceiling:session-back", sessionBack);

  // A poll (htmx passes no triggering event for "every Ns") while signed out: only a probe.
  document.addEventListener("htmx:confirm", function (event) {
    if (session.state === "ok" || event.detail.triggeringEvent) return;
    if (Date.now() - session.lastProbe < SESSION_PROBE_MS) { event.preventDefault(); return; }
    session.lastProbe = Date.now();
  });

  document.addEventListener("htmx:beforeSwap", function (event) {
    var xhr = event.detail.xhr;
    if (xhr.status === 401 || xhr.status === 403) {
      event.detail.shouldSwap = false;
      sessionEnded(xhr.status, xhr.getResponseHeader("Ceiling-Login-URL"));
    } else if (isLoginPage(xhr.responseURL)) {
      event.detail.shouldSwap = false;
      event.detail.isError = true;
      sessionEnded(401, null);
    } else if (xhr.status >= 200 && xhr.status < 300) {
      sessionBack();
    }
  });

  // --- status that stops updating -----------------------------------------------------
  // What a polled part of a page shows (a deployment's Status panel: [hx-trigger] "every 2s")
  // is as old as its last answer, and what a page rendered once beside a live socket shows (the
  // node page's agent line, [data-follows-live]) is as old as the page. When the poll fails
  // (the web server is down: htmx:sendError; it answered 5xx: htmx:responseError; no answer in
  // time: htmx:timeout), or the page's live socket is down (live.js: "ceiling:live-state"), the
  // part gets data-stale-since (ms since the epoch of its last fresh content), its
  // "updates every N s" line reads "not updating: stale since hh:mm:ss UTC" and each age in it
  // ([data-age], "4 s ago", counted when it was rendered; also a "Serving for" time) reads "4 s ago
  // as of hh:mm:ss UTC", and a live state ([data-stale-label]: "agent online") reads as its label
  // says, "agent online (as last seen hh:mm:ss UTC)", so old numbers are never shown as live. The next answered poll swaps in fresh content; a
  // socket that is live again clears the mark of what follows it.
  //
  // The rule for badges is the same on every page: each badge a poll or the socket keeps up to
  // date (a deployment's or sweep's status, an agent's, a process's health, the sampled status)
  // carries data-stale-label, "{text} (as last seen {at})", where {text} is what it said and {at}
  // the time its part went stale; a panel drawn from the socket is [data-follows-live], stale as
  // of when the socket stopped being live (the "since" of ceiling:live-state). A script that
  // writes a badge while it is marked (the socket's re-sync, before it is live) writes through
  // CeilingStale.write, so the mark keeps the new text and gives it back once the part is fresh.
  var pageLoadedAt = Date.now();
  var liveStaleSince = null;  // ms since the epoch the page's socket stopped being live
  // The server's clock minus the browser's (ms) from <meta name="server-now">, the time the page
  // was rendered; null on a page without it. The counted ages and heartbeats below use it.
  var pageClockOffset = (function () {
    var meta = document.querySelector('meta[name="server-now"]');
    var rendered = meta ? isoMs(meta.getAttribute("content")) : null;
    return rendered === null ? null : rendered - pageLoadedAt;
  })();

  function clockUtc(date) {
    function pad2(n) { return (n < 10 ? "0" : "") + n; }
    return pad2(date.getUTCHours()) + ":" + pad2(date.getUTCMinutes()) + ":" + pad2(date.getUTCSeconds()) + " UTC";
  }

  function freshAt(el) {
    var at = +el.getAttribute("data-fresh-at");
    return at || liveStaleSince || pageLoadedAt;
  }

  // A badge's stale words: its data-stale-label with {text} (its live text) and {at} filled in.
  function staleText(el) {
    return el.getAttribute("data-stale-label")
      .replace("{text}", el.getAttribute("data-live-text") || "")
      .replace("{at}", el.getAttribute("data-stale-at") || "");
  }

  // Write a badge's text: a badge marked stale keeps it for when its part is fresh again, and
  // reads as last seen with it meanwhile.
  function writeBadge(el, text) {
    if (!el) return;
    if (el.hasAttribute("data-live-text")) {
      el.setAttribute("data-live-text", text);
      el.textContent = staleText(el);
    } else {
      el.textContent = text;
    }
  }

  // A badge's own text, marked stale or not.
  function badgeText(el) {
    if (!el) return "";
    return el.hasAttribute("data-live-text") ? el.getAttribute("data-live-text") : el.textContent;
  }

  function paintAges(scope) {
    var stale = scope.hasAttribute("data-stale-since");
    var asOf = stale ? " as of " + clockUtc(new Date(+scope.getAttribute("data-stale-since"))) : "";
    Array.prototype.forEach.call(scope.querySelectorAll("[data-age]"), function (el) {
      if (stale) {
        if (!el.hasAttribute("data-age-text")) el.setAttribute("data-age-text", el.textContent);
        el.textContent = el.getAttribute("data-age-text") + asOf;
      } else if (el.hasAttribute("data-age-text")) {
        el.textContent = el.getAttribute("data-age-text");
        el.removeAttribute("data-age-text");
      }
    });
    // A state that holds only while updates come ("agent online") reads as last seen once they stop.
    var at = stale ? clockUtc(new Date(+scope.getAttribute("data-stale-since"))) : "";
    Array.prototype.forEach.call(scope.querySelectorAll("[data-stale-label]"), function (el) {
      if (stale) {
        if (!el.hasAttribute("data-live-text")) el.setAttribute("data-live-text", el.textContent);
        el.setAttribute("data-stale-at", at);
        el.textContent = staleText(el);
      } else if (el.hasAttribute("data-live-text")) {
        el.textContent = el.getAttribute("data-live-text");
        el.removeAttribute("data-live-text");
        el.removeAttribute("data-stale-at");
      }
    });
  }

  function markStale(scope, stale) {
    if (!scope || !scope.setAttribute) return;
    if (stale === scope.hasAttribute("data-stale-since")) return;
    // The heartbeat's age and the other counted ages (below) are counted on every second: they
    // are given as of that time.
    if (stale) paintHeartbeats(freshAt(scope), scope);
    if (stale) paintClocks(scope, freshAt(scope));
    if (stale) scope.setAttribute("data-stale-since", String(freshAt(scope)));
    else scope.removeAttribute("data-stale-since");
    paintCadence(scope);
    paintAges(scope);
  }

  // Swapped-in content is fresh as of now (the first content is as of the page's load).
  document.addEventListener("htmx:load", function (event) {
    var elt = event.detail.elt;
    if (elt && elt.setAttribute && elt.hasAttribute("hx-trigger") && elt !== document.body) {
      elt.setAttribute("data-fresh-at", String(Date.now()));
    }
  });

  function pollFailed(event) {
    var elt = event.detail.elt;
    var xhr = event.detail.xhr;
    // 401 and 403 are the session's to show (above); another 4xx is no outage.
    if (xhr && xhr.status > 0 && xhr.status < 500) return;
    if (elt && elt.getAttribute && /\bevery\b/.test(elt.getAttribute("hx-trigger") || "")) markStale(elt, true);
  }
  // A request the server answered (2xx, not the login page) tells live.js the server is there:
  // a socket waiting out its back-off after the server went away reconnects now.
  function serverAnswered() {
    document.dispatchEvent(new CustomEvent("ceiling:server-answered"));
  }
  document.addEventListener("htmx:afterRequest", function (event) {
    var xhr = event.detail.xhr;
    if (xhr && xhr.status >= 200 && xhr.status < 300 && !isLoginPage(xhr.responseURL)) serverAnswered();
  });

  document.addEventListener("htmx:sendError", pollFailed);
  document.addEventListener("htmx:responseError", pollFailed);
  document.addEventListener("htmx:timeout", pollFailed);

  document.addEventListener("ceiling:live-state", function (event) {
    var state = (event.detail || {}).state;
    // "connecting" is the first state of every page: what it rendered is still as of now.
    if (state === "connecting") return;
    var live = state === "live";
    liveStaleSince = live ? null : (event.detail || {}).since || liveStaleSince || Date.now();
    Array.prototype.forEach.call(document.querySelectorAll("[data-follows-live]"), function (el) {
      // a part whose own reads fail (the heartbeat's, below) stays stale until one is answered
      markStale(el, !live || !!el._readFailed);
    });
  });

  // --- the node agent's heartbeat ---------------------------------------------------------
  // An agent line ([data-heartbeat-of]: the node's name; the node page's "Agent" line, and one
  // per row of the nodes list) gives the age of the last heartbeat (data-heartbeat-at, ISO)
  // counted every second, in the pages' words ("4 s ago"), and the node's badge
  // ([data-agent-badge] naming the same node: the node page's head, the row's Agent cell) judges
  // the agent as the server does (Node.agent_online): online while that age is within
  // data-offline-after seconds (the server's CEILING_HEARTBEAT_TIMEOUT_S) and the agent did not
  // stop cleanly since (data-agent-stopped), else "agent offline (no heartbeat for 42 s)". A brief
  // line (data-heartbeat-brief, the list's) reads "last seen 4 s ago" and its badge "online",
  // "offline (no heartbeat for 42 s)". Heartbeats are not sent on the live socket: the page
  // re-reads its nodes as often as the agents heartbeat (data-heartbeat-every s), one read for
  // all its lines: GET /api/nodes/<name>/ for a page of one line, else GET /api/nodes/. A read
  // also brings the agent's pid ([data-agent-pid], ", pid 4321"), which a restarted agent
  // changes. The browser's clock is corrected by the server's time of rendering
  // (data-server-now). While a line is stale (its socket is down, or a read failed: it is then
  // marked like a failed poll, as of the last answered read) it keeps its age as of then. A page
  // without a socket (the nodes list) holds its badges in a [data-heartbeat-scope]: a failed read
  // marks it stale too, so its "re-read every N s" line says since when it is not updating and
  // each badge reads "online (as last seen hh:mm:ss UTC)", until a read is answered.
  var HEARTBEAT_TICK_MS = 1000;
  var HEARTBEAT_READ_MIN_S = 1;
  // The most nodes one read of the list brings (the API's largest page).
  var HEARTBEAT_LIST_LIMIT = 500;

  function durationText(seconds) {
    // deployments.views.common._duration_text: "42 s", "3 min 05 s", "2 h 07 min", "3 d 04 h"
    function pad2(n) { return (n < 10 ? "0" : "") + n; }
    var total = Math.max(0, Math.floor(seconds));
    var days = Math.floor(total / 86400), hours = Math.floor(total % 86400 / 3600);
    var minutes = Math.floor(total % 3600 / 60), secs = total % 60;
    if (days) return days + " d " + pad2(hours) + " h";
    if (hours) return hours + " h " + pad2(minutes) + " min";
    if (minutes) return minutes + " min " + pad2(secs) + " s";
    return secs + " s";
  }

  function agoText(seconds) {
    // deployments.views.common._when's "ago"
    if (Math.abs(seconds) < 1) return "just now";
    return seconds > 0 ? durationText(seconds) + " ago" : "in " + durationText(-seconds);
  }

  function isoMs(text) {
    // ms since the epoch of an ISO time; fractions past milliseconds (the API's microseconds) cut
    if (!text) return null;
    var ms = Date.parse(String(text).replace(/(\.\d{3})\d+/, "$1"));
    return isFinite(ms) ? ms : null;
  }

  function utcText(ms) {
    // deployments.views.common._utc_text: "2026-12-06 13:32:24 UTC"
    return new Date(ms).toISOString().slice(0, 19).replace("T", " ") + " UTC";
  }

  function heartbeatLines() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-heartbeat-of]"));
  }

  function agentBadge(line) {
    var name = line.getAttribute("data-heartbeat-of");
    var badges = document.querySelectorAll("[data-agent-badge]");
    for (var i = 0; i < badges.length; i++) {
      if (badges[i].getAttribute("data-agent-badge") === name) return badges[i];
    }
    return null;
  }

  // The line's age and its badge as of `now` (ms, the browser's clock; default: now); a part
  // already marked stale is left as it is.
  function paintHeartbeat(line, now) {
    if (line._clockOffset === undefined) line._clockOffset = lineClockOffset(line);
    var at = isoMs(line.getAttribute("data-heartbeat-at"));
    var age = at === null ? null : ((now || Date.now()) + line._clockOffset - at) / 1000;
    // a line inside a stale part (its own mark, or the part around it: a deployment page's
    // Node line in its polled panel) keeps its age as of then
    var lineStale = !!line.closest("[data-stale-since]");
    if (!lineStale && age !== null) {
      var ageEl = line.querySelector("[data-age]");
      if (ageEl) ageEl.textContent = agoText(age);
    }
    var badge = agentBadge(line);
    if (!badge || badge.closest("[data-stale-since]") || lineStale) return;
    var limit = parseFloat(line.getAttribute("data-offline-after"));
    var stopped = line.hasAttribute("data-agent-stopped");
    var online = age !== null && !stopped && !(age > limit);
    var text = online ? "online"
      : age === null || stopped ? "offline" : "offline (no heartbeat for " + durationText(age) + ")";
    if (!line.hasAttribute("data-heartbeat-brief")) text = "agent " + text;
    if (badge.textContent !== text) badge.textContent = text;
    badge.classList.toggle("ok", online);
    badge.classList.toggle("bad", !online);
  }

  // Every line's age and badge as of `now`; with `scope`, only the lines in or around it and
  // those whose badge is in it (a part about to be marked stale).
  function paintHeartbeats(now, scope) {
    heartbeatLines().forEach(function (line) {
      if (scope && !(scope.contains(line) || line.contains(scope) || scope.contains(agentBadge(line)))) return;
      paintHeartbeat(line, now);
    });
  }

  // The server's clock minus the browser's, in ms, for a line: the page's (see "relative times"
  // below), else from the line's own data-server-now; 0 when neither is known.
  function lineClockOffset(line) {
    if (pageClockOffset !== null) return pageClockOffset;
    var rendered = isoMs(line.getAttribute("data-server-now"));
    return rendered === null ? 0 : rendered - Date.now();
  }

  // A node read from the API: its last heartbeat (a new one is written into the line's text
  // too: "last heartbeat <time> (<age>)", a brief line's "last seen <age>"), its agent's pid
  // and whether its agent stopped cleanly since.
  function takeHeartbeat(line, node) {
    var at = isoMs(node.agent_heartbeat_at);
    var stoppedAt = isoMs(node.agent_stopped_at);
    line.toggleAttribute("data-agent-stopped", at !== null && stoppedAt !== null && stoppedAt >= at);
    var pid = line.querySelector("[data-agent-pid]");
    if (pid && "agent_pid" in node) {
      var pidText = node.agent_pid === null ? "" : ", pid " + node.agent_pid;
      if (pid.textContent !== pidText) pid.textContent = pidText;
    }
    if (at === null || at === isoMs(line.getAttribute("data-heartbeat-at"))) return;
    line.setAttribute("data-heartbeat-at", new Date(at).toISOString());
    var brief = line.hasAttribute("data-heartbeat-brief");
    var time = line.querySelector("time");
    if (!line.querySelector("[data-age]") || (!brief && !time)) {  // "never seen" until now
      line.textContent = brief ? "last seen " : "last heartbeat ";
      if (!brief) {
        time = line.appendChild(document.createElement("time"));
        line.appendChild(document.createTextNode(" ("));
      }
      line.appendChild(document.createElement("span")).setAttribute("data-age", "");
      if (!brief) line.appendChild(document.createTextNode(")"));
      if (pid) line.appendChild(pid);
    }
    if (!time) return;
    var iso = new Date(at).toISOString().slice(0, 19) + "Z";
    time.setAttribute("datetime", iso);
    time.title = iso;
    time.textContent = utcText(at);
  }

  function readHeartbeats() {
    var lines = heartbeatLines();
    if (!lines.length) return;
    if (session.state !== "ok") {  // signed out: a read is a probe, as the polls' (above)
      if (Date.now() - session.lastProbe < SESSION_PROBE_MS) return;
      session.lastProbe = Date.now();
    }
    var one = lines.length === 1;
    var url = one ? "/api/nodes/" + encodeURIComponent(lines[0].getAttribute("data-heartbeat-of")) + "/"
      : "/api/nodes/?limit=" + HEARTBEAT_LIST_LIMIT;
    var scopes = lines.concat([document.querySelector(".page-head[data-follows-live]")].filter(Boolean),
                              Array.prototype.slice.call(document.querySelectorAll("[data-heartbeat-scope]")));
    function failed() {
      lines.forEach(function (line) { line._readFailed = true; });
      scopes.forEach(function (scope) { markStale(scope, true); });
    }
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (response.status === 401 || response.status === 403) {
          sessionEnded(response.status, response.headers.get("Ceiling-Login-URL"));
          return null;
        }
        if (!response.ok || isLoginPage(response.url)) {
          if (isLoginPage(response.url)) sessionEnded(401, null);
          else failed();
          return null;
        }
        return response.json();
      })
      .then(function (body) {
        if (!body) return;
        sessionBack();
        serverAnswered();
        var answered = Date.now();
        var byName = {};
        (one ? [body] : body.results || []).forEach(function (node) { byName[node.name] = node; });
        lines.forEach(function (line) {
          var node = byName[line.getAttribute("data-heartbeat-of")];
          if (node) takeHeartbeat(line, node);
          line._readFailed = false;
        });
        // A line on a page with a live socket is fresh only while the socket is live too.
        var live = document.documentElement.getAttribute("data-live-state") === "live";
        scopes.forEach(function (scope) {
          scope.setAttribute("data-fresh-at", String(answered));
          if (live || !scope.hasAttribute("data-follows-live")) markStale(scope, false);
        });
        paintHeartbeats();
      })
      .catch(failed);
  }

  function followHeartbeats() {
    var lines = heartbeatLines();
    if (!lines.length) return;
    var every = Infinity;
    lines.forEach(function (line) {
      line._clockOffset = lineClockOffset(line);
      var own = parseFloat(line.getAttribute("data-heartbeat-every"));
      if (isFinite(own)) every = Math.min(every, own);
    });
    paintHeartbeats();
    setInterval(function () { paintHeartbeats(); }, HEARTBEAT_TICK_MS);
    every = Math.max(HEARTBEAT_READ_MIN_S, isFinite(every) ? every : 5);
    setInterval(readHeartbeats, every * 1000);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", followHeartbeats);
  } else {
    followHeartbeats();
  }

  // --- relative times that keep counting -----------------------------------------------------
  // An age the server rendered beside an absolute time ([data-age-of]: the UTC ISO time it counts
  // from; "3 min 05 s ago", "in 20 s" for a time to come, "just now") and a running duration
  // ([data-duration-from]: the ISO time it runs from; "8 min 58 s", a deployment's time serving)
  // are counted on every second from that time, so a page left open never shows "just now" for
  // something a minute old. The browser's clock is corrected by the server's time of rendering
  // (<meta name="server-now">). Inside a stale part ([data-stale-since], see "status that stops
  // updating" above) they stop at the time it went stale and read "... as of hh:mm:ss UTC".
  var CLOCK_TICK_MS = 1000;

  // The counted times in or around `root` as of `now` (ms, the browser's clock; default: now).
  // Without `now`, one in a stale part or already frozen (data-age-text) is left as it is.
  function paintClocks(root, now) {
    if (!root || !root.querySelectorAll) return;
    var clocks = Array.prototype.slice.call(root.querySelectorAll("[data-age-of], [data-duration-from]"));
    if (root.matches && root.matches("[data-age-of], [data-duration-from]")) clocks.push(root);
    var serverNow = (now || Date.now()) + (pageClockOffset || 0);
    clocks.forEach(function (el) {
      if (el.hasAttribute("data-age-text") || (!now && el.closest("[data-stale-since]"))) return;
      var ago = el.hasAttribute("data-age-of");
      var from = isoMs(el.getAttribute(ago ? "data-age-of" : "data-duration-from"));
      if (from === null) return;
      var seconds = (serverNow - from) / 1000;
      var text = ago ? agoText(seconds) : durationText(seconds);
      if (el.textContent !== text) el.textContent = text;
    });
  }

  function followClocks() {
    paintClocks(document);
    setInterval(function () { paintClocks(document); }, CLOCK_TICK_MS);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", followClocks);
  } else {
    followClocks();
  }

  // --- a flash message the live status outdates ----------------------------------------------
  // "Sweep #4 queued." (li.queued-notice) says what the sweep was when its form sent the page
  // here. The page's status ([data-queue-status], the stored status, re-rendered by its poll)
  // moves on: once it is neither pending nor waiting the message is removed, and its list with it
  // when nothing else is left in it.
  var QUEUED = /^(pending|waiting)$/;

  function dropOutdatedQueuedNotices() {
    var status = document.querySelector("[data-queue-status]");
    if (!status || QUEUED.test(status.getAttribute("data-queue-status"))) return;
    Array.prototype.forEach.call(document.querySelectorAll(".messages > li.queued-notice"), function (li) {
      var list = li.parentNode;
      list.removeChild(li);
      if (!list.children.length) list.parentNode.removeChild(list);
    });
  }

  document.addEventListener("htmx:afterSwap", dropOutdatedQueuedNotices);
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", dropOutdatedQueuedNotices);
  } else {
    dropOutdatedQueuedNotices();
  }

  window.CeilingSession = { ended: sessionEnded, isLoginPage: isLoginPage };
  window.CeilingStale = { write: writeBadge, text: badgeText };
})();
