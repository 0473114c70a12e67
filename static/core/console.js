// The console's only script (no inline script anywhere: the CSP allows none). Pages work
// without it; with it, htmx polls each page's live fragment, and this file
//  - pauses that polling while the tab is hidden or the Live toggle is off (kept per browser),
//  - refreshes at once when the tab comes back or Live is switched on,
//  - shows a banner while polls fail (Redis down: the server answers 503) and hides it after.
(function () {
  "use strict";
  var KEY = "queueadmin-live";

  function liveOn() {
    try { return window.localStorage.getItem(KEY) !== "off"; } catch (e) { return true; }
  }

  function setLive(on) {
    try { window.localStorage.setItem(KEY, on ? "on" : "off"); } catch (e) { /* private mode */ }
    syncToggles();
  }

  function syncToggles() {
    document.querySelectorAll("[data-live-toggle]").forEach(function (box) { box.checked = liveOn(); });
  }

  function refresh() {
    if (!window.htmx || document.hidden || !liveOn()) { return; }
    document.querySelectorAll("[data-live]").forEach(function (el) {
      window.htmx.ajax("GET", el.getAttribute("hx-get"), { source: el, target: el, swap: "outerHTML" });
    });
  }

  function banner(show) {
    var el = document.getElementById("poll-banner");
    if (el) { el.hidden = !show; }
  }

  document.addEventListener("change", function (event) {
    var box = event.target;
    if (box && box.matches && box.matches("[data-live-toggle]")) {
      setLive(box.checked);
      if (box.checked) { refresh(); }
    }
  });

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) { refresh(); }
  });

  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail.elt;
    if (elt && elt.hasAttribute && elt.hasAttribute("data-live") && (document.hidden || !liveOn())) {
      event.preventDefault();  // a poll while nobody looks: skip it
    }
  });

  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.successful) { banner(false); }
  });
  document.addEventListener("htmx:responseError", function () { banner(true); });
  document.addEventListener("htmx:sendError", function () { banner(true); });

  document.addEventListener("htmx:load", syncToggles);
  document.addEventListener("DOMContentLoaded", syncToggles);
})();
