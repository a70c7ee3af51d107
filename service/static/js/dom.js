// Small DOM and formatting helpers. Text always goes in as text nodes, never as HTML.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "value") el.value = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (key in el && !key.includes("-") && typeof value !== "string") el[key] = value;
    else el.setAttribute(key, value === true ? "" : value);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
}

export const STATES = [
  "queued",
  "starting",
  "running",
  "cancelling",
  "succeeded",
  "failed",
  "cancelled",
];
export const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);

export function stateBadge(state) {
  return h("span", { class: `badge state-${state}`, dataset: { state } }, state);
}

export function errorPanel(error, title = "Something went wrong") {
  const message = describeError(error);
  return h(
    "div",
    { class: "error-panel", role: "alert" },
    h("strong", {}, title),
    h("p", { class: "error-message" }, message),
  );
}

// The page-wide message line under the header, for errors outside any one panel.
export function showBanner(message) {
  const banner = document.getElementById("banner");
  banner.replaceChildren(
    h("span", {}, message),
    h("button", { type: "button", class: "link", onclick: hideBanner }, "Dismiss"),
  );
  banner.hidden = false;
}

export function hideBanner() {
  document.getElementById("banner").hidden = true;
}

export function describeError(error) {
  return typeof error?.describe === "function" ? error.describe() : String(error?.message ?? error);
}

export function formatNumber(value) {
  if (value === null || value === undefined || Number.isNaN(value)) return "—";
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value) && Math.abs(value) < 1e9) return String(value);
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) return value.toExponential(3);
  return String(Number(value.toPrecision(4)));
}

export function formatBytes(size) {
  if (size === null || size === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = size;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

export function formatDuration(seconds) {
  if (seconds === null || seconds === undefined || seconds < 0) return "—";
  if (seconds < 60) return `${Math.round(seconds)} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ${Math.round(seconds % 60)} s`;
  const hours = Math.floor(minutes / 60);
  if (hours < 48) return `${hours} h ${minutes % 60} min`;
  return `${Math.floor(hours / 24)} d ${hours % 24} h`;
}

// The API's timestamps are ISO 8601 in UTC; some lack the zone suffix.
export function parseTime(iso) {
  if (!iso) return null;
  const withZone = /[zZ]|[+-]\d\d:?\d\d$/.test(iso) ? iso : `${iso}Z`;
  const ms = Date.parse(withZone);
  return Number.isNaN(ms) ? null : ms;
}

export function formatAge(iso, now = Date.now()) {
  const ms = parseTime(iso);
  if (ms === null) return "—";
  const seconds = Math.max(0, (now - ms) / 1000);
  if (seconds < 5) return "just now";
  return `${formatDuration(seconds)} ago`;
}

// ISO-like and in UTC, as the API and the CLI write times: "2026-11-25 04:56:28 UTC".
export function formatTime(msOrIso) {
  const ms = typeof msOrIso === "number" ? msOrIso : parseTime(msOrIso);
  if (ms === null) return "—";
  return `${new Date(ms).toISOString().slice(0, 19).replace("T", " ")} UTC`;
}

// A <time>: how long ago, with the exact time on hover.
export function ageElement(iso, now = Date.now()) {
  const ms = parseTime(iso);
  return h(
    "time",
    { datetime: ms === null ? "" : new Date(ms).toISOString(), title: formatTime(ms) },
    formatAge(iso, now),
  );
}

// The first line of a (possibly multi-line) message, for a table cell.
export function firstLine(text) {
  return (text || "").split(/\r?\n/, 1)[0];
}

// `code` spans in a description (a recipe's docstring): <code> elements, never raw backticks.
export function withCode(text) {
  return String(text || "")
    .split(/`([^`]*)`/)
    .map((part, i) => (i % 2 ? h("code", {}, part) : part))
    .filter((part) => part !== "");
}

// A job's headline metrics: the last value of up to `count` of them, `loss` first, then the
// job's checkpoint `best_metric`, then the other names with "loss" in them, then the rest by name.
export function headlineMetrics(job, count = 3) {
  const metrics = job.latest_metrics || {};
  const best = job.spec?.checkpoint?.best_metric;
  const rank = (name) => (name === "loss" ? 0 : name === best ? 1 : name.includes("loss") ? 2 : 3);
  return Object.keys(metrics)
    .sort((a, b) => rank(a) - rank(b) || a.localeCompare(b))
    .slice(0, count)
    .map((name) => [name, metrics[name]]);
}

// A random key for Idempotency-Key (crypto.randomUUID needs a secure context).
export function randomKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// Hash routes: "#/jobs?state=running" -> {path: "/jobs", query: URLSearchParams}.
export function currentRoute() {
  const raw = location.hash.replace(/^#/, "") || "/jobs";
  const [path, search = ""] = raw.split("?");
  return { path: path || "/jobs", query: new URLSearchParams(search) };
}
