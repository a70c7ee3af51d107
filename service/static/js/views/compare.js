// Compare runs: several jobs' metrics overlaid, one chart per metric, and the keys of their
// specs that differ, side by side. Jobs come from the jobs page's selection (?ids=a,b), or
// are every job of one name (?name=) or with one tag (?tag=key=value). The runs list at the top,
// with each run's colour, is the legend of every chart.

import uPlot from "../../vendor/uplot/uPlot.esm.js";
import { api } from "../api.js";
import { ChartSettings, plotData } from "../chart-settings.js";
import { COLORS, HEIGHT, byName, options } from "../charts.js";
import { formatNumber, h, stateBadge } from "../dom.js";

const MAX_RUNS = 12;
const CHART_POINTS = 1000;

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
  const settings = new ChartSettings();
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
      section("Metrics", settings.toolbar(), charts),
      section("Spec differences", diff),
    ),
  );
  if (runs.length < 2) {
    charts.replaceChildren(h("p", { class: "muted" }, "Pick at least two jobs to compare (tick them on the jobs page)."));
  }
  diff.replaceChildren(specDiff(runs));
  const series = await Promise.all(runs.map((run) => chartPoints(run.job.id, ctx.signal)));
  drawCharts(charts, runs, series, ctx, settings);
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

// A job's series downsampled on the server (each bucket's smallest and largest point): one
// request per job, the same size whatever the job's length.
async function chartPoints(id, signal) {
  return (await api.listMetrics(id, { max_points: CHART_POINTS }, signal)).items;
}

// One chart per metric name; a line per run and attempt (a later attempt dashed, in its run's
// colour). The runs list above is the one legend; hovering a chart reads its values out in
// its caption.
function drawCharts(container, runs, series, ctx, settings) {
  const byMetric = new Map();
  let t0 = Infinity;
  const starts = series.map((points) => Math.min(...points.map((p) => p.ts)));
  series.forEach((points, run) => {
    for (const point of points) {
      if (!byMetric.has(point.name)) byMetric.set(point.name, new Map());
      const lines = byMetric.get(point.name);
      const key = `${run}/${point.attempt ?? 1}`;
      if (!lines.has(key)) lines.set(key, { run, attempt: point.attempt ?? 1, byStep: new Map() });
      const step = point.step ?? point.seq;
      lines.get(key).byStep.set(step, { step, ts: point.ts, value: point.value }); // a resumed step: the later value wins
      t0 = Math.min(t0, point.ts);
    }
  });
  if (!byMetric.size) {
    if (runs.length >= 2) container.replaceChildren(h("p", { class: "muted", id: "no-metrics" }, "None of these runs reported metrics."));
    return;
  }
  const charts = [];
  for (const name of [...byMetric.keys()].sort(byName)) {
    const lines = [...byMetric.get(name).values()].sort((a, b) => a.run - b.run || a.attempt - b.attempt);
    const attempts = (run) => lines.filter((line) => line.run === run).length;
    const chartLines = lines.map((line) => ({
      label: attempts(line.run) > 1 ? `${runs[line.run].label} · attempt ${line.attempt}` : runs[line.run].label,
      color: runs[line.run].color,
      dash: line.attempt > 1 ? [6, 4] : undefined,
      t0: starts[line.run], // relative time: since the run's own first point
      points: [...line.byStep.values()].sort((a, b) => a.step - b.step),
    }));
    const plot = h("div", { class: "chart-plot" });
    const readout = h("span", { class: "chart-readout small mono" });
    const shown = new Set(lines.map((line) => line.run)).size;
    const steps = new Set(chartLines.flatMap((line) => line.points.map((p) => p.step))).size;
    container.append(
      h(
        "figure",
        { class: "chart", dataset: { metric: name, series: String(shown), points: String(steps) } },
        h("figcaption", {}, h("span", { class: "chart-name" }, name), readout),
        plot,
      ),
    );
    charts.push({ plot, readout, lines: chartLines, chart: null });
  }
  const width = (plot) => Math.max(200, Math.floor(plot.clientWidth || container.clientWidth || 300));
  const draw = () => {
    for (const item of charts) {
      item.chart?.destroy();
      const built = plotData(item.lines, settings, t0);
      const hooks = { setCursor: [(u) => showReadout(u, item.readout)] };
      item.chart = new uPlot(options(built, settings, width(item.plot), { legend: false, hooks }), built.data, item.plot);
    }
  };
  draw();
  const stop = settings.onChange(draw);
  const observer = new ResizeObserver(() => charts.forEach((item) => item.chart.setSize({ width: width(item.plot), height: HEIGHT })));
  observer.observe(container);
  ctx.onCleanup(() => {
    stop();
    observer.disconnect();
    charts.forEach((item) => item.chart.destroy());
  });
}

// "step 120 · … · run-a 0.31 · run-b 0.4": what is under the cursor, smoothed lines only.
function showReadout(u, element) {
  const idx = u.cursor.idx;
  if (idx === null || idx === undefined) {
    element.textContent = "";
    return;
  }
  const parts = [u.series[0].value(u, u.data[0][idx], 0, idx)];
  u.series.forEach((s, i) => {
    if (i === 0 || s.label.endsWith(" (raw)")) return;
    const v = u.data[i][idx];
    if (v !== null && v !== undefined) parts.push(`${s.label} ${formatNumber(v)}`);
  });
  element.textContent = parts.join(" · ");
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
