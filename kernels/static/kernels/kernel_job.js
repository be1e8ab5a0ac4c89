// Live progress of a kernel job page: subscribes to the job's websocket group (kernel-job-<id>)
// through the shared live client when it is loaded, and on every kernel.progress message
// re-fetches the progress panel (and, when the status changes, the variant table) with htmx.
// The panel also polls every 2 s by itself, so the page stays current without a websocket.
(function () {
  "use strict";

  function init(root) {
    if (typeof window.CeilingLive === "undefined" || typeof htmx === "undefined") return;
    var group = root.getAttribute("data-group");
    var progressUrl = root.getAttribute("data-progress-url");
    var variantsUrl = root.getAttribute("data-variants-url");
    var lastStatus = null;
    window.CeilingLive.open({
      groups: [group],
      // A message older than the job (its data-created) was about an earlier job of that id.
      notBefore: window.CeilingLive.notBefore(root, group),
      onMessage: function (msg) {
        if (!msg || msg.type !== "kernel.progress") return;
        var panel = document.getElementById("job-progress");
        if (panel) htmx.ajax("GET", progressUrl, { target: "#job-progress", swap: "outerHTML" });
        var status = msg.data && msg.data.status;
        if (lastStatus !== null && status !== lastStatus && document.getElementById("variant-table")) {
          htmx.ajax("GET", variantsUrl + window.location.search, { target: "#variant-table", swap: "outerHTML" });
        }
        lastStatus = status;
      }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    Array.prototype.forEach.call(document.querySelectorAll("[data-live-kernel-job]"), init);
  });
})();
