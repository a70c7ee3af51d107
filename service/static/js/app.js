// The dashboard's entry point: hash routes, sign-in guard, and errors shown, never swallowed.

import { clearToken, getToken, onUnauthorized } from "./api.js";
import { currentRoute, errorPanel, hideBanner, showBanner } from "./dom.js";
import { renderCompare } from "./views/compare.js";
import { renderGoodput } from "./views/goodput.js";
import { renderJob } from "./views/job.js";
import { renderJobs } from "./views/jobs.js";
import { renderRuns } from "./views/runs.js";
import { renderSignIn } from "./views/signin.js";
import { renderSubmit } from "./views/submit.js";

const routes = [
  { pattern: /^\/signin$/, render: renderSignIn, nav: null, open: true },
  { pattern: /^\/jobs$/, render: renderJobs, nav: "jobs" },
  { pattern: /^\/jobs\/([^/]+)$/, render: renderJob, nav: "jobs" },
  { pattern: /^\/submit$/, render: renderSubmit, nav: "submit" },
  { pattern: /^\/compare$/, render: renderCompare, nav: "jobs" },
  { pattern: /^\/runs$/, render: renderRuns, nav: "runs" },
  { pattern: /^\/goodput$/, render: renderGoodput, nav: "goodput" },
];

let context = null;

// What a view gets: where to draw, its route, a signal aborted when it is left, and
// onCleanup for timers and streams.
function newContext(root, route, match) {
  const controller = new AbortController();
  const cleanups = [];
  return {
    root,
    route,
    params: match.slice(1).map(decodeURIComponent),
    signal: controller.signal,
    onCleanup: (fn) => cleanups.push(fn),
    dispose() {
      controller.abort();
      for (const fn of cleanups.splice(0)) fn();
    },
  };
}

async function render() {
  context?.dispose();
  context = null;
  hideBanner();
  const route = currentRoute();
  const root = document.getElementById("view");
  const entry = routes.find((r) => r.pattern.test(route.path));
  if (!entry) {
    location.replace("#/jobs");
    return;
  }
  if (!entry.open && !getToken()) {
    const next = encodeURIComponent(location.hash || "#/jobs");
    location.replace(`#/signin?next=${next}`);
    return;
  }
  updateNav(entry.nav);
  root.replaceChildren();
  const ctx = newContext(root, route, route.path.match(entry.pattern));
  context = ctx;
  try {
    await entry.render(ctx);
  } catch (err) {
    if (ctx.signal.aborted || err?.name === "AbortError") return;
    root.replaceChildren(errorPanel(err, "This page could not be shown"));
  }
}

function updateNav(active) {
  const signedIn = Boolean(getToken());
  document.getElementById("nav").hidden = !signedIn;
  for (const link of document.querySelectorAll("[data-nav]")) {
    link.classList.toggle("active", link.dataset.nav === active);
    if (link.dataset.nav === active) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

onUnauthorized((error) => {
  clearToken();
  const next = encodeURIComponent(location.hash || "#/jobs");
  sessionStorage.setItem("launchbay.signin-reason", `Your token is no longer accepted: ${error.message}`);
  location.hash = `#/signin?next=${next}`;
});

document.getElementById("sign-out").addEventListener("click", () => {
  clearToken();
  location.hash = "#/signin";
});

window.addEventListener("unhandledrejection", (event) => {
  if (event.reason?.name === "AbortError") {
    event.preventDefault();
    return;
  }
  showBanner(`Unexpected error: ${event.reason?.message ?? event.reason}`);
});

window.addEventListener("hashchange", render);
render();
