// Live pages (tidecd/ui/watch.py): when a new version of the page is swapped into <main>, the <details> a
// person had opened (a diff, the task results) stay open. Each is known by the object or panel holding it
// and its summary's words (numbers left out: "12 task results" is still the task results at 13).
(function () {
  "use strict";
  var opened = null;
  function key(details) {
    var holder = details.parentElement && details.parentElement.closest("[data-resource], [id]");
    var where = holder ? (holder.getAttribute("data-resource") || holder.id) : "";
    var summary = details.querySelector("summary");
    return where + "|" + (summary ? summary.textContent.replace(/[0-9]+/g, "#").trim() : "");
  }
  document.addEventListener("htmx:beforeSwap", function (event) {
    if (event.detail.elt && event.detail.elt.id === "watch") {
      opened = Array.prototype.map.call(document.querySelectorAll("main details[open]"), key);
    }
  });
  document.addEventListener("htmx:afterSettle", function () {
    if (opened === null) { return; }
    document.querySelectorAll("main details").forEach(function (details) {
      if (opened.indexOf(key(details)) >= 0) { details.open = true; }
    });
    opened = null;
  });
})();
