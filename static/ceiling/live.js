// The live-data client: one websocket to /ws/live/ per page, plain JS, no build step.
//
//   var live = CeilingLive.open({
//     groups: ["node-local", "deployment-3"],      // subscriptions, checked by the server
//     onMessage: function (msg, meta) {},          // a wire message {type, seq, group, ts, data};
//                                                  // meta.replayed is true for a re-synced one
//     onHistory: function (group, body) {},        // the REST re-sync answer of a group
//     onState: function (state, live) {},          // "connecting" | "live" | "reconnecting" | "signed-out"
//                                                  // ("signed-out" also when the account lost its
//                                                  // role: live.forbidden is then true)
//     notBefore: {"deployment-3": 1718000000}      // unix s per group: a message older than this
//                                                  // (the object's creation), streamed or kept
//                                                  // (replayed), is dropped: it was about another
//                                                  // object that had the same id or name;
//                                                  // CeilingLive.notBefore(el, group) reads it
//                                                  // from the element's data-created
//   });
//   live.subscribe(["deployment-4"]); live.unsubscribe(["deployment-3"]);
//
// What it guarantees a page:
// * Messages of one (group, type) are delivered in time order; an older or repeated one (a
//   replay from a re-sync that the stream already passed) is dropped.
// * A gap in a group's seq, and every (re)connect, re-syncs: the server's snapshot (the last
//   message of each type, sent with "live.subscribed"/"live.snapshot") and the REST endpoint of
//   the group (history for charts, via onHistory).
// * It reconnects by itself with capped exponential back-off and jitter (0.5 s doubling to
//   15 s), also when the connection is silently dead (no frame for PING + PONG_WAIT). A request
//   of the page that the same server answered (a poll, a read, the wall's question while not
//   live: "ceiling:server-answered" on document, see ceiling.js and dashboards.js) means the server is back: a retry still far off is made at once,
//   at most once per EARLY_RETRY_MIN_MS, so the page is live again within a poll of the server's
//   return; a server that is down answers nothing and keeps the back-off.
// * While not live, the page is told (onState, and <html data-live-state="...">, and every
//   [data-live-status] element says "reconnecting… stale since hh:mm:ss UTC"), so numbers on screen
//   are never presented as live when they are not.
// * A socket the server closes because the account may no longer read live data is not
//   retried in a loop: 4401 (signed out, session ended, deactivated, password changed) and a
//   refused handshake check the session first with one light API read (SESSION_CHECK_URL, one
//   node, as the signed-in viewer; never the page itself, which renders all it shows): a new
//   session cookie reconnects at once, a 401 shows "signed out", a 403 "no access";
//   4403 (role removed) shows it and retries only every 30 s.
// * A page request that finds the session ended (an htmx partial answered 401, a fetch sent to
//   the login page: the "ceiling:session-ended" event on document, see ceiling.js) shows
//   "signed out" at once and closes the socket, retrying every 30 s like after a 4401; the
//   client's own probe reports what it found through the same event.
// * It acknowledges what it processed ({"action": "ack"} every ack_every messages or 1 s), which
//   the server requires: a socket that stops acknowledging is closed (code 4408).
(function () {
  "use strict";

  var BACKOFF_MS = [500, 1000, 2000, 4000, 8000, 15000];
  var SIGNED_OUT_RETRY_MS = 30000;
  var PING_EVERY_MS = 10000;
  var PONG_WAIT_MS = 8000;
  var ACK_IDLE_MS = 1000;
  var EARLY_RETRY_MIN_MS = 3000;
  // The session check after a refused handshake or a 4401: the cheapest read that needs the
  // viewer role (the wall asks the same while not live). Signed out it answers 401, without the
  // role 403; the page's own URL would render the whole page (every tile of the wall) to say so.
  var SESSION_CHECK_URL = "/api/nodes/?limit=1";

  function pad2(n) { return (n < 10 ? "0" : "") + n; }

  // UTC time of a Date (or unix seconds) as hh:mm:ss, like every other time the pages show (the
  // browser's time zone plays no part). Chart ticks use it bare.
  function clock(when) {
    var d = typeof when === "number" ? new Date(when * 1000) : when;
    if (!d) return "—";
    return pad2(d.getUTCHours()) + ":" + pad2(d.getUTCMinutes()) + ":" + pad2(d.getUTCSeconds());
  }

  // The same, labelled for running text: "14:03:22 UTC" ("—" for no time).
  function clockUtc(when) {
    var text = clock(when);
    return text === "—" ? text : text + " UTC";
  }

  // The REST endpoint a group re-syncs from (the contract of the telemetry API).
  function restUrl(group) {
    var m;
    if ((m = /^node-(.+)$/.exec(group))) return "/api/nodes/" + encodeURIComponent(m[1]) + "/telemetry/";
    if ((m = /^deployment-(\d+)$/.exec(group))) return "/api/deployments/" + m[1] + "/telemetry/";
    if ((m = /^sweep-(\d+)$/.exec(group))) return "/api/sweeps/" + m[1] + "/";
    return null;
  }

  // The creation time of the object an element shows (its data-created: whole unix seconds,
  // rounded down, as the server's realtime.group_created_at), or null when it carries none.
  function createdOf(el) {
    var created = el && el.getAttribute ? parseFloat(el.getAttribute("data-created") || "") : NaN;
    return typeof created === "number" && isFinite(created) ? created : null;
  }

  // Whether a message may be about an object created at `created` (unix s, or null for unknown):
  // one older than it was about another object that had the same id or name (a database
  // re-created at the same path reuses both, and Redis keeps the old one's last messages).
  function notOlderThan(msg, created) {
    return typeof created !== "number" || (!!msg && typeof msg.ts === "number" && msg.ts >= created);
  }

  // {group: creation time} from an element's data-created, for the notBefore option ({} without it).
  function notBeforeOf(el, group) {
    var out = {};
    var created = createdOf(el);
    if (created !== null) out[group] = created;
    return out;
  }

  function Live(options) {
    this.options = options || {};
    this.groups = [];
    (this.options.groups || []).forEach(function (g) { if (this.groups.indexOf(g) < 0) this.groups.push(g); }, this);
    this.state = "connecting";
    this.staleSince = null;     // Date the data on screen stopped being live (null while live)
    this.lastError = "";        // the server's last live.error text
    this.forbidden = false;     // the server closed with 4403: the account has no role for live data
    this.lastSeq = {};          // group -> last seq seen
    this.lastTs = {};           // group -> ts of that message
    this.applied = {};          // "group type" -> ts of the last message handed to the page
    this.received = 0;          // broadcast messages since this socket opened
    this.acked = 0;
    this.ackEvery = 16;
    this.ackTimer = null;
    this.attempt = 0;
    this.ws = null;
    this.opened = false;
    this.lastFrameAt = 0;
    this.closedByUs = false;
    this.retryTimer = null;
    this.retryDueAt = 0;        // Date.now() of the retry retryTimer makes
    this.earlyRetryAt = 0;      // Date.now() of the last retry made early (serverAnswered)
    var self = this;
    this.pingTimer = setInterval(function () { self._ping(); }, PING_EVERY_MS);
    window.addEventListener("pagehide", function () { self.close(); });
    document.addEventListener("ceiling:session-ended", function (event) {
      if ((event.detail || {}).status === 401) self.sessionEnded();
    });
    document.addEventListener("ceiling:server-answered", function () { self.serverAnswered(); });
    this._connect();
  }

  // Tell every script of the page that a request found the session ended (401) or the role
  // gone (403); loginUrl is the server's Ceiling-Login-URL when it sent one.
  function reportSessionEnded(status, loginUrl) {
    document.dispatchEvent(new CustomEvent("ceiling:session-ended", { detail: { status: status, loginUrl: loginUrl || null } }));
  }

  function isLoginRedirect(response) {
    return !!response.redirected && /\/login\//.test(response.url);
  }

  Live.prototype._url = function () {
    var scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    var query = this.groups.map(function (g) { return "sub=" + encodeURIComponent(g); }).join("&");
    return scheme + "//" + window.location.host + "/ws/live/" + (query ? "?" + query : "");
  };

  Live.prototype._setState = function (state) {
    if (state !== "live" && !this.staleSince) this.staleSince = new Date();
    if (state === "live") this.staleSince = null;
    // An accepted socket proves a signed-in viewer again: ceiling.js clears its "signed out" /
    // "no access" notice and lets the page's polls run (a page without polls has no other signal).
    if (state === "live" && this.state !== "live") document.dispatchEvent(new CustomEvent("ceiling:session-back"));
    this.state = state;
    document.documentElement.setAttribute("data-live-state", state);
    paintStatus(this);
    // ceiling.js marks what the page rendered once beside the socket ([data-follows-live]) stale.
    // since: ms since the epoch the data on screen stopped being live (null while live).
    document.dispatchEvent(new CustomEvent("ceiling:live-state", {
      detail: { state: state, since: this.staleSince ? this.staleSince.getTime() : null }
    }));
    if (this.options.onState) this.options.onState(state, this);
  };

  Live.prototype._connect = function () {
    var self = this;
    this.retryTimer = null;
    this.opened = false;
    this.received = 0;
    this.acked = 0;
    var ws;
    try {
      ws = new WebSocket(this._url());
    } catch (err) {
      this._scheduleRetry();
      return;
    }
    this.ws = ws;
    ws.onopen = function () { self.opened = true; self.lastFrameAt = Date.now(); };
    ws.onmessage = function (event) { if (ws === self.ws) self._frame(event.data); };
    ws.onclose = function (event) {
      if (ws !== self.ws) return;
      self.ws = null;
      if (self.closedByUs) return;
      if (event.reason) self.lastError = event.reason;
      if (event.code === 4403) {
        // The account lost its role: reconnecting would only be refused again.
        self.forbidden = true;
        self._setState("signed-out");
        self.retryTimer = setTimeout(function () { self._connect(); }, SIGNED_OUT_RETRY_MS);
      } else if (!self.opened || event.code === 4401) {
        // Refused during the handshake (HTTP 403): signed out, or the server is down; or closed
        // because the session ended (4401), which a page request tells apart from a new one.
        if (self.state === "live") self._setState("reconnecting");
        self._probeSession();
      } else {
        self._setState("reconnecting");
        self._scheduleRetry();
      }
    };
  };

  // After a refused handshake or a 4401 close: the session check (SESSION_CHECK_URL) answered 401,
  // or sent to the login page, means the session ended (retry slowly, say so); 403 that the
  // account has no role any more, and after a 4403 it still has none (the same, as "no access");
  // anything else is a server that is away or a new session (back off and retry).
  Live.prototype._probeSession = function () {
    var self = this;
    function stopped() {
      self._setState("signed-out");
      self.retryTimer = setTimeout(function () { self._connect(); }, SIGNED_OUT_RETRY_MS);
    }
    fetch(SESSION_CHECK_URL, { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (self.closedByUs || self.retryTimer || self.ws) return;  // the page went on meanwhile
        if (response.status === 401 || isLoginRedirect(response)) {
          self.forbidden = false;
          stopped();
          reportSessionEnded(401, response.headers.get("Ceiling-Login-URL"));
        } else if (response.status === 403) {
          self.forbidden = true;
          stopped();
          reportSessionEnded(403, null);
        } else if (self.forbidden) {
          stopped();
        } else {
          self._setState("reconnecting");
          self._scheduleRetry();
        }
      })
      .catch(function () {
        if (self.closedByUs || self.retryTimer || self.ws) return;
        self._setState("reconnecting");
        self._scheduleRetry();
      });
  };

  // The session ended, as a page request found out: say so now rather than when the server's
  // re-check closes the socket, and reconnect only every SIGNED_OUT_RETRY_MS (a new session
  // cookie then goes live again). forbidden: the request was answered 403, the account has no
  // role any more ("no access", as after the session check's 403).
  Live.prototype.sessionEnded = function (forbidden) {
    if (this.closedByUs || this.state === "signed-out") return;
    if (this.retryTimer) { clearTimeout(this.retryTimer); this.retryTimer = null; }
    var ws = this.ws;
    this.ws = null;
    if (ws) { try { ws.close(1000); } catch (err) { /* closing anyway */ } }
    this.forbidden = !!forbidden;
    this._setState("signed-out");
    var self = this;
    this.retryTimer = setTimeout(function () { self._connect(); }, SIGNED_OUT_RETRY_MS);
  };

  Live.prototype._scheduleRetry = function () {
    if (this.retryTimer || this.closedByUs) return;
    var base = BACKOFF_MS[Math.min(this.attempt, BACKOFF_MS.length - 1)];
    this.attempt += 1;
    var delay = base * (0.75 + Math.random() * 0.5);
    var self = this;
    this.retryDueAt = Date.now() + delay;
    this.retryTimer = setTimeout(function () { self._connect(); }, delay);
  };

  // The page's server answered a request: while reconnecting, a retry due later than
  // EARLY_RETRY_MIN_MS from now is made now instead. The back-off count is kept, so a server
  // that answers requests but refuses the socket is still tried no more often than that, and one
  // that goes down again is waited for as long as before.
  Live.prototype.serverAnswered = function () {
    if (this.closedByUs || this.state !== "reconnecting" || !this.retryTimer) return;
    var now = Date.now();
    if (this.retryDueAt - now < EARLY_RETRY_MIN_MS || now - this.earlyRetryAt < EARLY_RETRY_MIN_MS) return;
    clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.earlyRetryAt = now;
    this._connect();
  };

  Live.prototype._send = function (obj) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(obj));
  };

  Live.prototype._ping = function () {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return;
    if (this.lastFrameAt && Date.now() - this.lastFrameAt > PING_EVERY_MS + PONG_WAIT_MS) {
      // Nothing at all (not even a pong) for too long: the connection is dead without TCP
      // having said so (a dropped network). Close it and reconnect.
      var dead = this.ws;
      this.ws = null;
      try { dead.close(); } catch (err) { /* already closing */ }
      this._setState("reconnecting");
      this._scheduleRetry();
      return;
    }
    this._send({ action: "ping" });
  };

  Live.prototype._frame = function (text) {
    this.lastFrameAt = Date.now();
    var msg;
    try { msg = JSON.parse(text); } catch (err) { return; }
    if (!msg || typeof msg !== "object") return;
    if (msg.group !== undefined && msg.seq !== undefined) { this._broadcast(msg); return; }
    if (msg.type === "live.subscribed" || msg.type === "live.snapshot") {
      if (msg.ack_every) this.ackEvery = msg.ack_every;
      var groups = msg.groups || {};
      var names = Object.keys(groups);
      names.forEach(function (g) { this._applySnapshot(g, groups[g]); }, this);
      if (msg.type === "live.subscribed" && this.state !== "live") {
        this.attempt = 0;
        this.lastError = "";
        this.forbidden = false;
        this._setState("live");
      }
      names.forEach(function (g) { this._restResync(g); }, this);
    } else if (msg.type === "live.error") {
      this.lastError = msg.error || "";
      if (window.console) console.warn("live: " + this.lastError);
    }
  };

  Live.prototype._applySnapshot = function (group, snap) {
    if (!snap) return;
    if (typeof snap.seq === "number") { this.lastSeq[group] = snap.seq; }
    var latest = snap.latest || {};
    Object.keys(latest).forEach(function (type) {
      var m = latest[type];
      if (m && typeof m.ts === "number" && (this.lastTs[group] === undefined || m.ts > this.lastTs[group])) this.lastTs[group] = m.ts;
      this._deliver(m, true);
    }, this);
  };

  Live.prototype._broadcast = function (msg) {
    this.received += 1;
    var g = msg.group;
    var last = this.lastSeq[g];
    if (msg.seq > 0 && last !== undefined && last > 0) {
      if (msg.seq <= last && !(msg.ts > (this.lastTs[g] || 0) + 1)) {
        this._ack();
        return;  // a repeat of something already seen
      }
      if (msg.seq > last + 1) this._resync(g);
    }
    this.lastSeq[g] = msg.seq;
    this.lastTs[g] = msg.ts;
    this._deliver(msg, false);
    this._ack();
  };

  Live.prototype._deliver = function (msg, replayed) {
    if (!msg || !msg.group || !msg.type) return;
    if (!notOlderThan(msg, (this.options.notBefore || {})[msg.group])) return;
    var key = msg.group + " " + msg.type;
    var before = this.applied[key];
    if (before !== undefined && typeof msg.ts === "number" && msg.ts < before) return;
    if (replayed && before !== undefined && msg.ts === before) return;
    if (typeof msg.ts === "number") this.applied[key] = msg.ts;
    if (this.options.onMessage) {
      try { this.options.onMessage(msg, { replayed: !!replayed }); } catch (err) { if (window.console) console.error(err); }
    }
  };

  Live.prototype._ack = function () {
    var self = this;
    if (this.received - this.acked >= this.ackEvery) {
      this.acked = this.received;
      this._send({ action: "ack", count: this.received });
      if (this.ackTimer) { clearTimeout(this.ackTimer); this.ackTimer = null; }
    } else if (!this.ackTimer && this.received > this.acked) {
      this.ackTimer = setTimeout(function () {
        self.ackTimer = null;
        if (self.received > self.acked) { self.acked = self.received; self._send({ action: "ack", count: self.received }); }
      }, ACK_IDLE_MS);
    }
  };

  // A gap in seq: ask the server for the group's snapshot and fetch its REST state.
  Live.prototype._resync = function (group) {
    this._send({ action: "resync", groups: [group] });
  };

  Live.prototype._restResync = function (group) {
    var url = restUrl(group);
    var self = this;
    if (!url) return;
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" }, cache: "no-store" })
      .then(function (r) {
        if (r.status === 401) reportSessionEnded(401, null);
        return r.ok ? r.json() : null;
      })
      .then(function (body) {
        if (!body) return;
        var latest = body.latest || {};
        Object.keys(latest).forEach(function (type) { self._deliver(latest[type], true); });
        if (self.options.onHistory) self.options.onHistory(group, body);
      })
      .catch(function () { /* the stream and the snapshot still carry the state */ });
  };

  Live.prototype.subscribe = function (groups) {
    var added = (groups || []).filter(function (g) { return this.groups.indexOf(g) < 0; }, this);
    if (!added.length) return;
    this.groups = this.groups.concat(added);
    this._send({ action: "subscribe", groups: added });
  };

  Live.prototype.unsubscribe = function (groups) {
    var gone = (groups || []).filter(function (g) { return this.groups.indexOf(g) >= 0; }, this);
    if (!gone.length) return;
    this.groups = this.groups.filter(function (g) { return gone.indexOf(g) < 0; });
    gone.forEach(function (g) { delete this.lastSeq[g]; delete this.lastTs[g]; }, this);
    this._send({ action: "unsubscribe", groups: gone });
  };

  Live.prototype.close = function () {
    this.closedByUs = true;
    clearInterval(this.pingTimer);
    if (this.retryTimer) clearTimeout(this.retryTimer);
    if (this.ws) { try { this.ws.close(1000); } catch (err) { /* closing anyway */ } }
  };

  Live.prototype.isLive = function () { return this.state === "live"; };

  // Every [data-live-status] element shows the connection state in words.
  function paintStatus(live) {
    var text;
    // The connection's state, not the freshness of any node or sample (that is shown per tile).
    if (live.state === "live") text = "updates connected";
    else if (live.state === "connecting") text = "connecting…";
    else if (live.state === "signed-out") {
      text = live.forbidden ? "no access: your account may no longer read live data (ask an admin, then reload)"
                            : "updates stopped (signed out): log in again to see live data";
      if (live.staleSince) text += " (stale since " + clockUtc(live.staleSince) + ")";
    }
    else text = "reconnecting… stale since " + clockUtc(live.staleSince);
    Array.prototype.forEach.call(document.querySelectorAll("[data-live-status]"), function (el) {
      el.textContent = text;
      el.setAttribute("data-state", live.state);
      el.title = live.lastError || (live.state === "live" ? "this page receives live updates; a node's own state is shown with its samples" : "");
    });
  }

  window.CeilingLive = {
    open: function (options) { return new Live(options); },
    restUrl: restUrl,
    clock: clock,
    clockUtc: clockUtc,
    sessionEnded: reportSessionEnded,
    isLoginRedirect: isLoginRedirect,
    createdOf: createdOf,
    notBefore: notBeforeOf,
    // Whether an element (its data-created) takes a message: not one older than its object.
    accepts: function (el, msg) { return notOlderThan(msg, createdOf(el)); }
  };
})();
