// Runs as a table: one row per job (GET /v1/runs: the newest 200 that match, each with its
// metrics summed up by the API), chosen spec fields and each metric's last and best value as
// columns; sorted by any column, filtered by state, name, tag and (for an admin) owner; tick
// rows to compare them.

import { api } from "../api.js";
import { byName } from "../charts.js";
import { STATES, ageElement, formatNumber, h, stateBadge } from "../dom.js";

const PAGE_SIZE = 200;
const FILTERS = ["state", "name", "tag", "owner", "fields", "sort"];
const MAX_FIELDS = 6;
const MAX_METRICS = 6;

export async function renderRuns(ctx) {
  const query = Object.fromEntries(FILTERS.map((key) => [key, ctx.route.query.get(key) || ""]));
  const go = (changes) => {
    const next = new URLSearchParams();
    for (const key of FILTERS) {
      const value = key in changes ? changes[key] : query[key];
      if (value) next.set(key, value);
    }
    location.hash = `#/runs${next.toString() ? `?${next}` : ""}`;
  };
  const text = (key, label, placeholder, size = 12) =>
    h(
      "label",
      { class: "filter" },
      `${label} `,
      h("input", {
        type: "search",
        id: `runs-${key}`,
        value: query[key],
        placeholder,
        size,
        onchange: (event) => go({ [key]: event.target.value.trim() }),
      }),
    );
  const owner = text("owner", "Owner", "anyone");
  owner.hidden = true;
  api.isAdmin(ctx.signal).then((admin) => { owner.hidden = !admin; }).catch(() => {});
  const state = h(
    "select",
    { id: "runs-state", onchange: (event) => go({ state: event.target.value }) },
    h("option", { value: "" }, "all states"),
    STATES.map((s) => h("option", { value: s, selected: s === query.state }, s)),
  );
  const compare = h("a", { class: "button", id: "runs-compare", "aria-disabled": "true" }, "Compare selected");
  const count = h("span", { class: "muted", id: "runs-count" });
  const table = h("table", { class: "runs-table", id: "runs-table" });
  ctx.root.append(
    h(
      "section",
      { class: "runs-page" },
      h("div", { class: "toolbar" }, h("h1", {}, "Runs"), count, h("span", { class: "spacer" }), compare),
      h(
        "div",
        { class: "toolbar filters" },
        h("label", { class: "filter" }, "State ", state),
        text("name", "Name contains", "any name"),
        text("tag", "Tag", "key=value"),
        owner,
        text("fields", "Spec fields", "config.lr, nproc_per_node", 24),
      ),
      h("div", { class: "table-scroll" }, table),
    ),
  );

  const page = await api.listRuns(
    { state: query.state, name_contains: query.name, tag: query.tag, owner: query.owner, limit: PAGE_SIZE },
    ctx.signal,
  );
  const runs = page.items;
  count.textContent = page.total > runs.length ? `newest ${runs.length} of ${page.total}` : `${page.total} run${page.total === 1 ? "" : "s"}`;
  const fields = query.fields ? query.fields.split(",").map((f) => f.trim()).filter(Boolean) : differingFields(runs);
  const metrics = [...new Set(runs.flatMap((run) => Object.keys(run.metrics)))].sort(byName).slice(0, MAX_METRICS);
  const columns = [
    { key: "name", label: "Name", value: (run) => run.job.name, cell: nameCell },
    { key: "state", label: "State", value: (run) => run.job.state, cell: (run) => stateBadge(run.job.state) },
    { key: "created", label: "Created", value: (run) => run.job.created_at, cell: (run) => ageElement(run.job.created_at) },
    ...fields.map((field) => ({ key: `spec:${field}`, label: field, value: (run) => specValue(run.job.spec, field), mono: true })),
    ...metrics.flatMap((name) =>
      ["last", "best"].map((which) => ({
        key: `${which}:${name}`,
        label: `${name} (${which})`,
        value: (run) => run.metrics[name]?.[which] ?? null,
        number: true,
        title: (run) => (which === "best" && run.metrics[name] ? `best is the ${run.metrics[name].best_mode}` : ""),
      })),
    ),
  ];
  const sortBy = query.sort || "created:desc"; // "<column key>:<asc|desc>"; keys hold ":" too
  const sortKey = sortBy.slice(0, sortBy.lastIndexOf(":"));
  const sortDir = sortBy.slice(sortBy.lastIndexOf(":") + 1);
  const sorted = sortRuns(runs, columns.find((c) => c.key === sortKey) || columns[2], sortDir === "asc" ? 1 : -1);
  const selected = new Set();
  const updateCompare = () => {
    compare.textContent = selected.size ? `Compare selected (${selected.size})` : "Compare selected";
    if (selected.size >= 2) {
      compare.href = `#/compare?ids=${[...selected].map(encodeURIComponent).join(",")}`;
      compare.removeAttribute("aria-disabled");
    } else {
      compare.removeAttribute("href");
      compare.setAttribute("aria-disabled", "true");
    }
  };
  const header = (column) => {
    const active = column.key === sortKey;
    const next = active && sortDir !== "asc" ? "asc" : "desc";
    return h(
      "th",
      { scope: "col", dataset: { key: column.key }, "aria-sort": active ? (sortDir === "asc" ? "ascending" : "descending") : "none" },
      h("button", { type: "button", class: "link sort", onclick: () => go({ sort: `${column.key}:${next}` }) }, column.label, active ? (sortDir === "asc" ? " ▲" : " ▼") : ""),
    );
  };
  table.append(
    h("thead", {}, h("tr", {}, h("th", {}, ""), columns.map(header))),
    h(
      "tbody",
      { id: "runs-body" },
      sorted.map((run) =>
        h(
          "tr",
          { dataset: { jobId: run.job.id } },
          h(
            "td",
            { class: "pick-cell" },
            h("input", {
              type: "checkbox",
              class: "pick",
              "aria-label": "compare this run",
              onchange: (event) => {
                if (event.target.checked) selected.add(run.job.id);
                else selected.delete(run.job.id);
                updateCompare();
              },
            }),
          ),
          columns.map((column) => {
            const value = column.value(run);
            const shown = column.cell ? column.cell(run) : column.number ? formatNumber(value) : (value ?? "—");
            return h("td", { class: column.number || column.mono ? "mono" : "", dataset: { key: column.key }, title: column.title?.(run) || null }, shown);
          }),
        ),
      ),
    ),
  );
  if (!runs.length) table.after(h("p", { class: "empty" }, "No run matches these filters."));
}

function nameCell(run) {
  return h("a", { href: `#/jobs/${encodeURIComponent(run.job.id)}` }, run.job.name);
}

// Empty values last, whichever the direction.
function sortRuns(runs, column, direction) {
  const keyed = runs.map((run) => [column.value(run), run]);
  keyed.sort(([a], [b]) => {
    if (a === null || a === undefined || a === "—") return b === null || b === undefined || b === "—" ? 0 : 1;
    if (b === null || b === undefined || b === "—") return -1;
    if (typeof a === "number" && typeof b === "number") return direction * (a - b);
    return direction * String(a).localeCompare(String(b), undefined, { numeric: true });
  });
  return keyed.map(([, run]) => run);
}

// The spec fields worth a column when none are chosen: those whose values differ between
// the runs (config first), at most MAX_FIELDS.
function differingFields(runs) {
  const flat = runs.map((run) => flatten(run.job.spec));
  const keys = [...new Set(flat.flatMap((spec) => [...spec.keys()]))];
  const differing = keys.filter((key) => key !== "name" && new Set(flat.map((spec) => spec.get(key))).size > 1);
  return differing.sort((a, b) => Number(!a.startsWith("config.")) - Number(!b.startsWith("config.")) || a.localeCompare(b)).slice(0, MAX_FIELDS);
}

function specValue(spec, path) {
  const value = path.split(".").reduce((node, key) => (node && typeof node === "object" ? node[key] : undefined), spec);
  if (value === undefined || value === null) return "—";
  return typeof value === "object" ? JSON.stringify(value) : typeof value === "number" ? value : String(value);
}

function flatten(value, prefix = "", out = new Map()) {
  if (value && typeof value === "object" && !Array.isArray(value)) {
    for (const [key, inner] of Object.entries(value)) flatten(inner, prefix ? `${prefix}.${key}` : key, out);
  } else if (prefix) {
    out.set(prefix, JSON.stringify(value));
  }
  return out;
}
