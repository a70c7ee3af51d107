// Jobs at a glance: a table refreshed every few seconds, filtered by state, name, tag and
// (for an admin) owner; pick jobs to compare their runs.

import { api } from "../api.js";
import { GoodputBars } from "../goodput.js";
import {
  STATES,
  TERMINAL,
  ageElement,
  describeError,
  errorPanel,
  firstLine,
  formatNumber,
  h,
  headlineMetrics,
  showBanner,
  stateBadge,
} from "../dom.js";

const REFRESH_MS = 2000;
const PAGE_SIZE = 100;
const COLUMNS = ["", "Name", "State", "Progress", "Metrics", "Attempt", "Age", "Worker", ""];
const FILTERS = ["state", "name", "tag", "owner"];

export async function renderJobs(ctx) {
  const query = Object.fromEntries(FILTERS.map((key) => [key, ctx.route.query.get(key) || ""]));
  const { state } = query;
  const go = (changes) => {
    const next = new URLSearchParams();
    for (const key of FILTERS) {
      const value = key in changes ? changes[key] : query[key];
      if (value) next.set(key, value);
    }
    const search = next.toString();
    location.hash = search ? `#/jobs?${search}` : "#/jobs";
  };
  const filter = h(
    "select",
    { id: "state-filter", onchange: (event) => go({ state: event.target.value }) },
    h("option", { value: "" }, "all states"),
    STATES.map((s) => h("option", { value: s, selected: s === state }, s)),
  );
  const textFilter = (key, label, placeholder) =>
    h(
      "label",
      { class: "filter" },
      `${label} `,
      h("input", {
        type: "search",
        id: `${key}-filter`,
        value: query[key],
        placeholder,
        size: 12,
        onchange: (event) => go({ [key]: event.target.value.trim() }),
      }),
    );
  const ownerFilter = textFilter("owner", "Owner", "anyone");
  ownerFilter.hidden = true;
  api.isAdmin(ctx.signal).then((admin) => { ownerFilter.hidden = !admin; }).catch(() => {});
  const count = h("span", { class: "muted", id: "jobs-count" });
  const problem = h("div", { class: "inline-error", role: "status" });
  const tbody = h("tbody", { id: "jobs-body" });
  const filtered = FILTERS.some((key) => query[key]);
  const empty = h("p", { class: "empty", hidden: true }, filtered ? "No job matches these filters." : "No jobs yet. ");
  if (!filtered) empty.append(h("a", { href: "#/submit" }, "Submit one."));
  const selected = new Set();
  const compare = h("a", { class: "button", id: "compare-selected", "aria-disabled": "true" }, "Compare selected");
  const compareAll = h("a", { class: "button", id: "compare-all", hidden: !(query.name || query.tag) }, "Compare these runs");
  if (query.name || query.tag) {
    const params = new URLSearchParams();
    if (query.name) params.set("name", query.name);
    if (query.tag) params.set("tag", query.tag);
    compareAll.href = `#/compare?${params}`;
  }
  const updateCompare = () => {
    const ids = [...selected];
    compare.textContent = ids.length ? `Compare selected (${ids.length})` : "Compare selected";
    if (ids.length >= 2) {
      compare.href = `#/compare?ids=${ids.map(encodeURIComponent).join(",")}`;
      compare.removeAttribute("aria-disabled");
    } else {
      compare.removeAttribute("href");
      compare.setAttribute("aria-disabled", "true");
    }
  };

  ctx.root.append(
    h(
      "section",
      { class: "jobs-page" },
      h(
        "div",
        { class: "toolbar" },
        h("h1", {}, "Jobs"),
        count,
        h("span", { class: "spacer" }),
        compare,
        compareAll,
        h("a", { class: "button primary", href: "#/submit" }, "Submit a job"),
      ),
      h(
        "div",
        { class: "toolbar filters" },
        h("label", { class: "filter" }, "State ", filter),
        textFilter("name", "Name", "any name"),
        textFilter("tag", "Tag", "key=value"),
        ownerFilter,
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
  const bars = new GoodputBars(ctx.signal);
  const refresh = async () => {
    const page = await api.listJobs({ ...query, limit: PAGE_SIZE }, ctx.signal);
    problem.replaceChildren();
    const now = Date.now();
    const seen = new Set();
    page.items.forEach((job, index) => {
      seen.add(job.id);
      let row = rows.get(job.id);
      if (!row) {
        row = newRow(job.id, () => refresh().catch(showProblem), (on) => {
          if (on) selected.add(job.id);
          else selected.delete(job.id);
          updateCompare();
        });
        rows.set(job.id, row);
      }
      updateRow(row, job, now);
      bars.update(job.id, row.goodput);
      if (tbody.children[index] !== row.tr) tbody.insertBefore(row.tr, tbody.children[index] || null);
    });
    for (const [id, row] of rows) {
      if (!seen.has(id)) {
        row.tr.remove();
        rows.delete(id);
        selected.delete(id);
      }
    }
    updateCompare();
    empty.hidden = page.items.length > 0;
    count.textContent =
      page.total > page.items.length
        ? `newest ${page.items.length} of ${page.total}${page.total_is_estimate ? "+" : ""}`
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

function newRow(id, afterCancel, onSelect) {
  const cell = (label) => h("td", { dataset: { label } });
  const pick = h("input", {
    type: "checkbox",
    class: "pick",
    "aria-label": "compare this job",
    onchange: (event) => onSelect(event.target.checked),
  });
  const cells = {
    pick: h("td", { class: "pick-cell" }, pick),
    name: cell("Name"),
    state: cell("State"),
    progress: cell("Progress"),
    metrics: cell("Metrics"),
    attempt: cell("Attempt"),
    age: cell("Age"),
    worker: cell("Worker"),
    actions: h("td", { class: "actions" }),
  };
  const link = h("a", { href: `#/jobs/${encodeURIComponent(id)}` });
  cells.name.append(link, h("div", { class: "muted small mono job-id" }, id.slice(0, 12)));
  const outcome = h("div", { class: "outcome small" });
  const badge = h("span");
  cells.state.append(badge, outcome);
  const cancel = cancelButton(id, afterCancel);
  cells.actions.append(cancel);
  // Where its time went, under its progress (kept apart: the progress cell is redrawn).
  const progress = h("div");
  const goodput = h("div", { class: "goodput-cell" });
  cells.progress.append(progress, goodput);
  const tr = h("tr", { dataset: { jobId: id } }, Object.values(cells));
  return { tr, cells, link, cancel, badge, outcome, progress, goodput };
}

function updateRow(row, job, now) {
  row.tr.dataset.state = job.state;
  row.link.textContent = job.name;
  setOnce(row.badge, job.state, () => stateBadge(job.state));
  // Why it ended: the exit reason and the first line of the message (all of it on hover);
  // while it waits, its place in the queue and why; what went wrong without failing it.
  const position = job.queue_position === null ? "" : `#${job.queue_position}: `;
  const message = job.pending_reason ? `${position}${job.pending_reason}` : firstLine(job.message);
  const warnings = job.warnings || [];
  const outcomeKey = `${job.exit_reason}|${job.message}|${message}|${warnings.join("\n")}`;
  setOnce(row.outcome, outcomeKey, () => outcomeLines(job, message, warnings));
  row.outcome.hidden = !((job.exit_reason && job.exit_reason !== "completed") || message || warnings.length);
  const { step, total_steps: total } = job.progress;
  const progressKey = `${step}/${total}`;
  setOnce(row.progress, progressKey, () => progressCell(step, total));
  const headline = headlineMetrics(job);
  setOnce(row.cells.metrics, JSON.stringify(headline), () => metricList(headline));
  row.cells.attempt.textContent = String(job.attempt);
  row.cells.age.replaceChildren(ageElement(job.created_at, now));
  row.cells.worker.textContent = job.worker || "—";
  row.cancel.hidden = TERMINAL.has(job.state) || job.state === "cancelling";
}

// The exit reason, then the message's first line cut to the cell with an ellipsis (all of it
// on hover), then the warnings: each a line of its own, so none widens the table.
function outcomeLines(job, message, warnings) {
  const reason = job.exit_reason && job.exit_reason !== "completed" ? job.exit_reason : null;
  const full = job.pending_reason || job.message || "";
  return [
    reason ? h("span", { class: "exit-reason", title: full }, reason) : null,
    message ? h("span", { class: "message-line pending-reason", title: full }, message) : null,
    warnings.length ? warningLine(warnings) : null,
  ];
}

// "loss 0.31", "val_loss 0.4", "accuracy 0.91": one line each.
function metricList(headline) {
  if (!headline.length) return h("span", { class: "muted" }, "—");
  return h(
    "dl",
    { class: "headline-metrics" },
    headline.map(([name, value]) =>
      h("div", { dataset: { metric: name } }, h("dt", {}, name), h("dd", { class: "mono" }, formatNumber(value))),
    ),
  );
}

// "⚠ 2 warnings: <the first>", all of them on hover.
function warningLine(warnings) {
  const count = `${warnings.length} warning${warnings.length === 1 ? "" : "s"}`;
  return h("span", { class: "message-line warning-line", title: warnings.join("\n\n") }, `⚠ ${count}: ${warnings[0]}`);
}

function setOnce(cell, key, build) {
  if (cell.dataset.key === key) return;
  cell.dataset.key = key;
  cell.replaceChildren(...[build()].flat().filter(Boolean));
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
