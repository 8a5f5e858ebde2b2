// Live pages (tidecd/ui/watch.py): when a new version of the page is swapped into <main>, the <details> a
// person had opened (a diff, the task results) stay open. Each is known by the object or panel holding it
// and its summary's words (numbers left out: "12 task results" is still the task results at 13).
// The server opens some by itself (the task results while a sync runs: data-auto-open); those say nothing
// of what the person wants, so they neither add to nor take from what is remembered, unless clicked.
(function () {
  "use strict";
  var opened = {};  // key -> true: what the person opened, kept across every swap of the page
  function key(details) {
    var holder = details.parentElement && details.parentElement.closest("[data-resource], [id]");
    var where = holder ? (holder.getAttribute("data-resource") || holder.id) : "";
    var summary = details.querySelector("summary");
    return where + "|" + (summary ? summary.textContent.replace(/[0-9]+/g, "#").trim() : "");
  }
  document.addEventListener("click", function (event) {
    var summary = event.target && event.target.closest && event.target.closest("main details > summary");
    if (summary) { summary.parentElement.removeAttribute("data-auto-open"); }  // now the person's choice
  }, true);
  document.addEventListener("htmx:beforeSwap", function (event) {
    if (!(event.detail.elt && event.detail.elt.id === "watch")) { return; }
    document.querySelectorAll("main details:not([data-auto-open])").forEach(function (details) {
      if (details.open) { opened[key(details)] = true; } else { delete opened[key(details)]; }
    });
  });
  document.addEventListener("htmx:afterSettle", function () {
    document.querySelectorAll("main details").forEach(function (details) {
      if (opened[key(details)]) { details.open = true; details.removeAttribute("data-auto-open"); }
    });
  });
})();
