// Jobs at a glance: a table refreshed every few seconds, filtered by state.

import { api } from "../api.js";
import {
  STATES,
  TERMINAL,
  describeError,
  errorPanel,
  formatAge,
  formatNumber,
  formatTime,
  h,
  latestLoss,
  showBanner,
  stateBadge,
} from "../dom.js";

const REFRESH_MS = 2000;
const PAGE_SIZE = 100;
const COLUMNS = ["Name", "State", "Progress", "Loss", "Attempt", "Age", "Worker", ""];

export async function renderJobs(ctx) {
  const state = ctx.route.query.get("state") || "";
  const filter = h(
    "select",
    {
      id: "state-filter",
      onchange: (event) => {
        const value = event.target.value;
        location.hash = value ? `#/jobs?state=${encodeURIComponent(value)}` : "#/jobs";
      },
    },
    h("option", { value: "" }, "all states"),
    STATES.map((s) => h("option", { value: s, selected: s === state }, s)),
  );
  const count = h("span", { class: "muted", id: "jobs-count" });
  const problem = h("div", { class: "inline-error", role: "status" });
  const tbody = h("tbody", { id: "jobs-body" });
  const empty = h("p", { class: "empty", hidden: true }, state ? `No ${state} jobs.` : "No jobs yet. ");
  if (!state) empty.append(h("a", { href: "#/submit" }, "Submit one."));

  ctx.root.append(
    h(
      "section",
      { class: "jobs-page" },
      h(
        "div",
        { class: "toolbar" },
        h("h1", {}, "Jobs"),
        h("label", { class: "filter" }, "State ", filter),
        count,
        h("a", { class: "button primary", href: "#/submit" }, "Submit a job"),
      ),
      problem,
      h(
        "table",
        { class: "jobs-table" },
        h("thead", {}, h("tr", {}, COLUMNS.map((c) => h("th", { scope: "col" }, c)))),
        tbody,
      ),
      empty,
    ),
  );

  const rows = new Map();
  const refresh = async () => {
    const page = await api.listJobs({ state, limit: PAGE_SIZE }, ctx.signal);
    problem.replaceChildren();
    const now = Date.now();
    const seen = new Set();
    page.items.forEach((job, index) => {
      seen.add(job.id);
      let row = rows.get(job.id);
      if (!row) {
        row = newRow(job.id, () => refresh().catch(showProblem));
        rows.set(job.id, row);
      }
      updateRow(row, job, now);
      if (tbody.children[index] !== row.tr) tbody.insertBefore(row.tr, tbody.children[index] || null);
    });
    for (const [id, row] of rows) {
      if (!seen.has(id)) {
        row.tr.remove();
        rows.delete(id);
      }
    }
    empty.hidden = page.items.length > 0;
    count.textContent =
      page.total > page.items.length
        ? `newest ${page.items.length} of ${page.total}`
        : `${page.total} job${page.total === 1 ? "" : "s"}`;
  };
  const showProblem = (err) => {
    if (ctx.signal.aborted || err.name === "AbortError") return;
    problem.replaceChildren(errorPanel(err, "Could not refresh the jobs (retrying)"));
  };

  await refresh().catch((err) => {
    if (!rows.size) throw err; // nothing to show yet: the page says what went wrong
    showProblem(err);
  });
  const timer = setInterval(() => refresh().catch(showProblem), REFRESH_MS);
  ctx.onCleanup(() => clearInterval(timer));
}

function newRow(id, afterCancel) {
  const cell = (label) => h("td", { dataset: { label } });
  const cells = {
    name: cell("Name"),
    state: cell("State"),
    progress: cell("Progress"),
    loss: cell("Loss"),
    attempt: cell("Attempt"),
    age: cell("Age"),
    worker: cell("Worker"),
    actions: h("td", { class: "actions" }),
  };
  const link = h("a", { href: `#/jobs/${encodeURIComponent(id)}` });
  cells.name.append(link, h("div", { class: "muted small mono" }, id.slice(0, 12)));
  const cancel = cancelButton(id, afterCancel);
  cells.actions.append(cancel);
  const tr = h("tr", { dataset: { jobId: id } }, Object.values(cells));
  return { tr, cells, link, cancel };
}

function updateRow(row, job, now) {
  row.tr.dataset.state = job.state;
  row.link.textContent = job.name;
  setOnce(row.cells.state, job.state, () => stateBadge(job.state));
  const { step, total_steps: total } = job.progress;
  const progressKey = `${step}/${total}`;
  setOnce(row.cells.progress, progressKey, () => progressCell(step, total));
  row.cells.loss.textContent = formatNumber(latestLoss(job.latest_metrics));
  row.cells.attempt.textContent = String(job.attempt);
  row.cells.age.textContent = formatAge(job.created_at, now);
  row.cells.age.title = formatTime(job.created_at);
  row.cells.worker.textContent = job.worker || "—";
  row.cancel.hidden = TERMINAL.has(job.state) || job.state === "cancelling";
}

function setOnce(cell, key, build) {
  if (cell.dataset.key === key) return;
  cell.dataset.key = key;
  cell.replaceChildren(build());
}

export function progressCell(step, total) {
  if (step === null || step === undefined) return h("span", { class: "muted" }, "—");
  if (!total) return h("span", {}, `step ${step}`);
  const pct = Math.min(100, Math.round((100 * step) / total));
  return h(
    "div",
    { class: "progress" },
    h("progress", { max: total, value: Math.min(step, total), "aria-label": "progress" }),
    h("span", { class: "small" }, `${step} / ${total} (${pct}%)`),
  );
}

// Two clicks: "Cancel", then "Confirm cancel" within a few seconds (no blocking dialog).
export function cancelButton(id, after) {
  let armed = null;
  const button = h("button", { type: "button", class: "danger small", dataset: { action: "cancel" } }, "Cancel");
  button.addEventListener("click", async () => {
    if (!armed) {
      button.textContent = "Confirm cancel";
      armed = setTimeout(() => {
        armed = null;
        button.textContent = "Cancel";
      }, 4000);
      return;
    }
    clearTimeout(armed);
    armed = null;
    button.disabled = true;
    button.textContent = "Cancelling…";
    try {
      await api.cancelJob(id);
    } catch (err) {
      showBanner(`Could not cancel the job: ${describeError(err)}`);
    } finally {
      button.disabled = false;
      button.textContent = "Cancel";
      await after();
    }
  });
  return button;
}
