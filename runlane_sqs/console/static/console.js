// runlane-sqs console: confirmation before an action, and an optional auto-refresh
// that keeps the page's filters (they are in its URL). No framework, no build step.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }
  follow(document.querySelector("[data-live-progress]"));
  const toggle = document.querySelector("input[data-refresh]");
  if (!toggle) return;
  const key = "runlane-console-refresh";
  toggle.checked = window.sessionStorage.getItem(key) === "on";
  let timer = null;
  const arm = () => {
    window.clearTimeout(timer);
    if (toggle.checked) {
      timer = window.setTimeout(() => window.location.reload(), Number(toggle.dataset.refresh) * 1000);
    }
  };
  toggle.addEventListener("change", () => {
    window.sessionStorage.setItem(key, toggle.checked ? "on" : "off");
    arm();
  });
  arm();
});

// A run page while the run (or its group) is unfinished: read the page again every few
// seconds and put its status, facts (progress), state and groups in place, without a
// reload (the scroll position, a half-filled form stay). Stops once the page read says
// nothing changes any more.
const LIVE_PARTS = ["run-status", "facts", "state-live", "groups-live"];

function follow(marker) {
  if (!marker) return;
  const seconds = Number(marker.dataset.liveProgress) || 2;
  const update = async () => {
    let page;
    try {
      const response = await fetch(window.location.href, { credentials: "same-origin" });
      if (!response.ok) return window.setTimeout(update, seconds * 1000);
      page = new DOMParser().parseFromString(await response.text(), "text/html");
    } catch (error) {
      return window.setTimeout(update, seconds * 1000);
    }
    for (const id of LIVE_PARTS) {
      const fresh = page.getElementById(id);
      const shown = document.getElementById(id);
      if (fresh && shown) shown.replaceWith(document.importNode(fresh, true));
    }
    if (page.querySelector("[data-live-progress]")) window.setTimeout(update, seconds * 1000);
  };
  window.setTimeout(update, seconds * 1000);
}
