// Compare runs: several jobs' metrics overlaid, one chart per metric, and the keys of their
// specs that differ, side by side. Jobs come from the jobs page's selection (?ids=a,b), or
// are every job of one name (?name=) or with one tag (?tag=key=value).

import uPlot from "../../vendor/uplot/uPlot.esm.js";
import { api } from "../api.js";
import { AXIS, COLORS, HEIGHT, byName } from "../charts.js";
import { formatNumber, h, stateBadge } from "../dom.js";

const MAX_RUNS = 12;
const PAGE = 1000;
const MAX_PAGES = 20; // per job: 20,000 points

export async function renderCompare(ctx) {
  const query = ctx.route.query;
  const ids = (query.get("ids") || "").split(",").filter(Boolean).slice(0, MAX_RUNS);
  const name = query.get("name") || "";
  const tag = query.get("tag") || "";
  const jobs = ids.length
    ? await Promise.all(ids.map((id) => api.getJob(id, ctx.signal)))
    : (await api.listJobs({ name, tag, limit: MAX_RUNS }, ctx.signal)).items.reverse();
  const what = ids.length ? "the selected jobs" : name ? `the jobs named “${name}”` : tag ? `the jobs tagged ${tag}` : "";
  const charts = h("div", { class: "charts", id: "compare-charts" });
  const diff = h("div", { id: "spec-diff" });
  const runs = jobs.map((job, i) => ({ job, color: COLORS[i % COLORS.length], label: labelOf(job, jobs) }));
  ctx.root.append(
    h(
      "section",
      { class: "compare-page", dataset: { runs: String(runs.length) } },
      h("a", { href: "#/jobs", class: "back small" }, "← Jobs"),
      h("h1", {}, `Compare ${runs.length} run${runs.length === 1 ? "" : "s"}`),
      what ? h("p", { class: "muted" }, `Runs: ${what}${jobs.length === MAX_RUNS ? ` (the newest ${MAX_RUNS})` : ""}.`) : null,
      h("ul", { class: "runs", id: "compare-runs" }, runs.map(runItem)),
      section("Metrics", charts),
      section("Spec differences", diff),
    ),
  );
  if (runs.length < 2) {
    charts.replaceChildren(h("p", { class: "muted" }, "Pick at least two jobs to compare (tick them on the jobs page)."));
  }
  diff.replaceChildren(specDiff(runs));
  const series = await Promise.all(runs.map((run) => allMetrics(run.job.id, ctx.signal)));
  drawCharts(charts, runs, series, ctx);
}

function section(title, ...children) {
  const slug = title.toLowerCase().replace(/\W+/g, "-");
  return h("section", { class: `panel panel-${slug}` }, h("h2", {}, title), children);
}

// A run's label: its name, with its id's first characters when another run has the same name.
function labelOf(job, jobs) {
  const twins = jobs.filter((other) => other.name === job.name).length;
  return twins > 1 ? `${job.name} (${job.id.slice(0, 6)})` : job.name;
}

function runItem(run) {
  return h(
    "li",
    { class: "run", dataset: { jobId: run.job.id } },
    swatch(run.color),
    h("a", { href: `#/jobs/${encodeURIComponent(run.job.id)}` }, run.label),
    stateBadge(run.job.state),
  );
}

// A colour sample; set through the CSSOM, which the page's CSP allows (a style attribute not).
function swatch(color) {
  const element = h("span", { class: "swatch", "aria-hidden": "true" });
  element.style.backgroundColor = color;
  return element;
}

async function allMetrics(id, signal) {
  const points = [];
  let after = 0;
  for (let page = 0; page < MAX_PAGES; page += 1) {
    const body = await api.listMetrics(id, { after, limit: PAGE }, signal);
    points.push(...body.items);
    if (body.items.length < PAGE || body.next_after <= after) break;
    after = body.next_after;
  }
  return points;
}

// One chart per metric name; one series per run, on the union of their steps.
function drawCharts(container, runs, series, ctx) {
  const byMetric = new Map();
  series.forEach((points, run) => {
    for (const point of points) {
      const x = point.step ?? point.seq;
      if (!byMetric.has(point.name)) byMetric.set(point.name, runs.map(() => new Map()));
      byMetric.get(point.name)[run].set(x, point.value); // a resumed step: the later value wins
    }
  });
  if (!byMetric.size) {
    if (runs.length >= 2) container.replaceChildren(h("p", { class: "muted", id: "no-metrics" }, "None of these runs reported metrics."));
    return;
  }
  const plots = [];
  for (const name of [...byMetric.keys()].sort(byName)) {
    const perRun = byMetric.get(name);
    const xs = [...new Set(perRun.flatMap((values) => [...values.keys()]))].sort((a, b) => a - b);
    const data = [xs, ...perRun.map((values) => xs.map((x) => (values.has(x) ? values.get(x) : null)))];
    const plot = h("div", { class: "chart-plot" });
    const shown = perRun.filter((values) => values.size > 0).length;
    container.append(
      h(
        "figure",
        { class: "chart", dataset: { metric: name, series: String(shown), points: String(xs.length) } },
        h("figcaption", {}, h("span", { class: "chart-name" }, name)),
        plot,
      ),
    );
    plots.push({ plot, data, name });
  }
  const width = (plot) => Math.max(200, Math.floor(plot.clientWidth || container.clientWidth || 300));
  const charts = plots.map(({ plot, data, name }) => new uPlot(options(name, runs, width(plot)), data, plot));
  const observer = new ResizeObserver(() => charts.forEach((chart, i) => chart.setSize({ width: width(plots[i].plot), height: HEIGHT })));
  observer.observe(container);
  ctx.onCleanup(() => {
    observer.disconnect();
    charts.forEach((chart) => chart.destroy());
  });
}

function options(name, runs, width) {
  return {
    width,
    height: HEIGHT,
    scales: { x: { time: false } },
    cursor: { drag: { x: true, y: false } },
    // The runs' names and colours only; values show on hover in the caption-free legend.
    legend: { show: true, live: false },
    axes: [
      { ...AXIS, label: "step", labelSize: 20 },
      { ...AXIS, size: 60, values: (_u, splits) => splits.map(formatNumber) },
    ],
    series: [
      { label: "step" },
      ...runs.map((run) => ({
        label: run.label,
        stroke: run.color,
        width: 2,
        spanGaps: true,
        value: (_u, v) => formatNumber(v),
        points: { size: 4 },
      })),
    ],
  };
}

// The spec keys (dotted paths) whose values are not the same in every run.
function specDiff(runs) {
  const flat = runs.map((run) => flatten(run.job.spec));
  const keys = [...new Set(flat.flatMap((spec) => [...spec.keys()]))].sort();
  const differing = keys.filter((key) => new Set(flat.map((spec) => spec.get(key) ?? "—")).size > 1);
  if (runs.length < 2) return h("p", { class: "muted" }, "One run: nothing to compare.");
  if (!differing.length) return h("p", { class: "muted", id: "same-specs" }, "The specs are the same.");
  return h(
    "div",
    { class: "table-scroll" },
    h(
      "table",
      { class: "spec-diff" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "key"), runs.map((run) => h("th", { scope: "col" }, swatch(run.color), run.label)))),
      h(
        "tbody",
        {},
        differing.map((key) =>
          h("tr", { dataset: { key } }, h("th", { scope: "row", class: "mono" }, key), flat.map((spec) => h("td", { class: "mono" }, spec.get(key) ?? "—"))),
        ),
      ),
    ),
    h("p", { class: "muted small" }, `${keys.length - differing.length} other keys are the same in every run.`),
  );
}

// {"config": {"lr": 0.1}} -> Map {"config.lr" => "0.1"}; an empty object is no key at all.
function flatten(value, prefix = "", out = new Map()) {
  if (value && typeof value === "object" && !Array.isArray(value)) {
    for (const [key, inner] of Object.entries(value)) flatten(inner, prefix ? `${prefix}.${key}` : key, out);
  } else if (prefix) {
    out.set(prefix, typeof value === "string" ? value : JSON.stringify(value));
  }
  return out;
}
