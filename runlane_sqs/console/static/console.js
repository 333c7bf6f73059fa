// runlane-sqs console: confirmation before an action, and an optional auto-refresh
// that keeps the page's filters (they are in its URL). No framework, no build step.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }
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
