// The console's only script (no inline script anywhere: the CSP allows none). Pages work
// without it; with it, htmx polls each page's live fragment, and this file
//  - pauses that polling while the tab is hidden or the Live toggle is off (kept per browser),
//  - refreshes at once when the tab comes back or Live is switched on,
//  - shows a banner while polls fail (Redis down: the server answers 503) and hides it after,
//  - in the action forms: "select all", the count of selected rows, action buttons enabled
//    only with a selection, and the Confirm of a bulk action enabled once the count is typed.
// Polling skips a live fragment while its form holds something of the operator's (a row
// selected, a worker name typed): the swap would throw the selection away. It resumes once
// the selection is cleared (or the action is done: the page reloads after it).
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

  function holding(el) {
    if (el.querySelector("input[data-select]:checked")) { return true; }
    var held = el.querySelectorAll("[data-hold]");
    for (var i = 0; i < held.length; i++) {
      if (held[i].value || held[i] === document.activeElement) { return true; }
    }
    return false;
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail.elt;
    if (elt && elt.hasAttribute && elt.hasAttribute("data-live") &&
        (document.hidden || !liveOn() || holding(elt))) {
      event.preventDefault();  // nobody looks, or the operator is choosing rows: skip it
    }
  });

  function syncSelection(form) {
    var boxes = form.querySelectorAll("input[data-select]");
    var n = 0;
    boxes.forEach(function (b) { if (b.checked) { n++; } });
    form.querySelectorAll("[data-needs-selection]").forEach(function (btn) { btn.disabled = n === 0; });
    form.querySelectorAll("[data-select-all]").forEach(function (all) {
      all.checked = n > 0 && n === boxes.length;
      all.indeterminate = n > 0 && n < boxes.length;
      all.disabled = boxes.length === 0;
    });
    form.querySelectorAll("[data-selected-count]").forEach(function (el) {
      el.textContent = n ? n + " selected" : "";
      el.classList.toggle("paused", n > 0);
    });
  }

  function syncTyped(input) {
    var form = input.form;
    var ok = input.value.replace(/[\s,._']/g, "") === input.getAttribute("data-typed-count").replace(/[\s,._']/g, "");
    form.querySelectorAll("[data-confirm-button]").forEach(function (btn) { btn.disabled = !ok; });
  }

  function syncForms(root) {
    (root || document).querySelectorAll("form").forEach(function (form) {
      if (form.querySelector("input[data-select]")) { syncSelection(form); }
    });
    (root || document).querySelectorAll("input[data-typed-count]").forEach(syncTyped);
  }

  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!box || !box.matches || !box.form) { return; }
    if (box.matches("[data-select-all]")) {
      box.form.querySelectorAll("input[data-select]").forEach(function (b) { b.checked = box.checked; });
    }
    if (box.matches("[data-select-all], input[data-select]")) { syncSelection(box.form); }
  });

  document.addEventListener("input", function (event) {
    var el = event.target;
    if (el && el.matches && el.matches("input[data-typed-count]")) { syncTyped(el); }
  });

  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.successful) { banner(false); }
  });
  document.addEventListener("htmx:responseError", function () { banner(true); });
  document.addEventListener("htmx:sendError", function () { banner(true); });

  // A wide table scrolls in its own box (.scroll-x with an id): a poll's swap keeps it where
  // the operator scrolled it, instead of jumping back to its left edge.
  var scrolled = {};
  document.addEventListener("htmx:beforeSwap", function (event) {
    scrolled = {};
    document.querySelectorAll(".scroll-x[id]").forEach(function (box) { scrolled[box.id] = box.scrollLeft; });
  });

  function restoreScroll() {
    Object.keys(scrolled).forEach(function (id) {
      var box = document.getElementById(id);
      if (box) { box.scrollLeft = scrolled[id]; }
    });
  }

  // On the swap itself, before the browser paints the new table at its left edge.
  document.addEventListener("htmx:afterSwap", restoreScroll);

  document.addEventListener("htmx:load", function (event) { syncToggles(); syncForms(event.target); });
  document.addEventListener("DOMContentLoaded", function () { syncToggles(); syncForms(); });
})();
