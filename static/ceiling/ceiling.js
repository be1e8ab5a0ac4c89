// Small page helpers shared by every page: copy-to-clipboard buttons, the CSRF header for
// htmx requests (Django rejects unsafe requests without it), confirmation of destructive
// forms and log tails that follow new output.
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
})();
