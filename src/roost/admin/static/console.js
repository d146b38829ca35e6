// Live refresh for the console: re-fetch the page every few seconds and swap the parts
// marked data-live. The pages read the same without it; forms are never replaced, so
// nothing typed is lost.
(function () {
  "use strict";
  var PERIOD_MS = 3000;
  var parts = document.querySelectorAll("[data-live]");
  var toggle = document.getElementById("live");
  if (!parts.length || !toggle || !window.fetch || !window.DOMParser) { return; }
  toggle.parentNode.hidden = false;
  var busy = false;
  function refresh() {
    if (busy || !toggle.checked || document.hidden) { return; }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (text) {
        if (text === null) { return; }
        var fresh = new DOMParser().parseFromString(text, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (old) {
          var next = fresh.querySelector('[data-live="' + old.getAttribute("data-live") + '"]');
          if (next) { old.replaceWith(document.importNode(next, true)); }
        });
      })
      .catch(function () { /* the node may be restarting: try again next period */ })
      .then(function () { busy = false; });
  }
  window.setInterval(refresh, PERIOD_MS);
})();
