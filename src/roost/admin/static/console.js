// Live refresh for the console: re-fetch the page every few seconds and swap the parts
// marked data-live. The pages read the same without it; forms with fields are never inside
// a live part, so nothing typed is lost, and expanded rows stay expanded.
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
          if (!next) { return; }
          // Rows expanded by hand stay expanded (rows are only ever added, so places hold).
          var opened = [];
          old.querySelectorAll("details").forEach(function (d, i) { if (d.open) { opened.push(i); } });
          var copy = document.importNode(next, true);
          var fresh_details = copy.querySelectorAll("details");
          opened.forEach(function (i) { if (fresh_details[i]) { fresh_details[i].open = true; } });
          old.replaceWith(copy);
        });
      })
      .catch(function () { /* the node may be restarting: try again next period */ })
      .then(function () { busy = false; });
  }
  window.setInterval(refresh, PERIOD_MS);
})();
