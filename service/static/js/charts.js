// One live uPlot chart per metric name (others of the job overlaid on request), redrawn at
// most once a frame, drawn as the page's `ChartSettings` say.

import uPlot from "../vendor/uplot/uPlot.esm.js";
import { plotData, xAxis, xOfPoint } from "./chart-settings.js";
import { formatNumber, h } from "./dom.js";

export const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4d7c0f"];
export const HEIGHT = 200;
const SETTLE_MS = 250; // a zoom or pan this long still reads its range's points
const PAN_FRACTION = 0.1; // of the chart's width, per wheel notch
export const AXIS = { stroke: "#475569", grid: { stroke: "#e2e8f0", width: 1 }, ticks: { stroke: "#cbd5e1" } };

// Each run of the job is a line of its own: an attempt (a retry that resumes from a checkpoint
// reports its steps again) and, within an attempt, each elastic restart (the restart event's
// seq divides the attempt's points); later attempts are dashed. A chart can overlay other
// metrics of the job (its caption's "overlay" menu). The legend, live, is the hover read-out:
// step, time and each line's value under the cursor. Drag zooms into a range of x (double
// click resets), shift + wheel pans a zoomed chart; once a zoom or pan settles, `loadRange`
// (name, after, until) → points, when given, brings the range's points at the chart's
// resolution (the page's first read is downsampled over the whole job).
export class MetricCharts {
  constructor(container, settings, { loadRange } = {}) {
    this.container = container;
    this.settings = settings;
    this.loadRange = loadRange;
    this.metrics = new Map();
    this.restarts = new Map(); // attempt -> seqs of its restart events
    this.t0 = Infinity; // the time of the job's first point: relative time starts there
    this.frame = null;
    this.observer = new ResizeObserver(() => this.resize());
    this.observer.observe(container);
    this.unsubscribe = settings.onChange(() => {
      for (const metric of this.metrics.values()) metric.rebuild = true;
      this.schedule();
    });
  }

  // A `restart` event (from the timeline or the stream), before the points that follow it.
  addRestart(attempt, seq) {
    const seqs = this.restarts.get(attempt) || [];
    if (!seqs.includes(seq)) seqs.push(seq);
    this.restarts.set(attempt, seqs);
  }

  runOf(point) {
    const attempt = point.attempt ?? 1;
    const restart = (this.restarts.get(attempt) || []).filter((seq) => seq < point.seq).length;
    return { attempt, restart, key: attempt * 100000 + restart };
  }

  // A point of GET /metrics or of a `metric` event; a step a run reports again replaces its
  // earlier value.
  add(point) {
    const metric = this.metrics.get(point.name) || this.create(point.name);
    const run = this.runOf(point);
    let line = metric.runs.get(run.key);
    if (!line) {
      line = { ...run, byStep: new Map() };
      metric.runs.set(run.key, line);
      metric.rebuild = true; // a new series: the chart is made again
    }
    const step = point.step ?? point.seq;
    line.byStep.set(step, { step, ts: point.ts, value: point.value, seq: point.seq });
    if (point.ts < this.t0) {
      this.t0 = point.ts;
      if (this.settings.x === "relative") for (const other of this.metrics.values()) other.dirty = true;
    }
    metric.latest = point.value;
    metric.dirty = true;
    this.schedule();
  }

  create(name) {
    const value = h("span", { class: "chart-value" });
    const plot = h("div", { class: "chart-plot" });
    const overlay = h("select", {
      class: "chart-overlay small",
      "aria-label": `overlay another metric on ${name}`,
      onchange: (event) => this.toggleOverlay(name, event.target.value),
    });
    const card = h(
      "figure",
      { class: "chart", dataset: { metric: name, points: "0", runs: "0", series: "0" } },
      h("figcaption", {}, h("span", { class: "chart-name" }, name), overlay, value),
      plot,
    );
    const metric = { name, runs: new Map(), overlays: [], card, plot, value, overlay, chart: null, zoom: null };
    plot.addEventListener("wheel", (event) => this.pan(metric, event), { passive: false });
    metric.color = COLORS[this.metrics.size % COLORS.length];
    this.metrics.set(name, metric);
    const order = [...this.metrics.keys()].sort(byName);
    const next = order[order.indexOf(name) + 1];
    this.container.insertBefore(card, next ? this.metrics.get(next).card : null);
    this.container.dataset.charts = String(this.metrics.size);
    for (const each of this.metrics.values()) this.overlayMenu(each);
    return metric;
  }

  // "overlay…" and every other metric of the job, ticked when on this chart.
  overlayMenu(metric) {
    const others = [...this.metrics.keys()].filter((name) => name !== metric.name).sort(byName);
    metric.overlay.hidden = !others.length;
    metric.overlay.replaceChildren(
      h("option", { value: "" }, metric.overlays.length ? `+${metric.overlays.length} overlaid` : "overlay…"),
      ...others.map((name) => h("option", { value: name }, `${metric.overlays.includes(name) ? "✓ " : ""}${name}`)),
    );
    metric.overlay.value = "";
  }

  toggleOverlay(name, other) {
    const metric = this.metrics.get(name);
    if (!metric || !other) return;
    const at = metric.overlays.indexOf(other);
    if (at >= 0) metric.overlays.splice(at, 1);
    else metric.overlays.push(other);
    metric.card.dataset.overlays = metric.overlays.join(",");
    metric.rebuild = true;
    this.overlayMenu(metric);
    this.schedule();
  }

  schedule() {
    if (this.frame === null) this.frame = requestAnimationFrame(() => this.flush());
  }

  // The chart's lines: its metric's runs, then each overlaid metric's.
  linesOf(metric) {
    const names = [metric.name, ...metric.overlays];
    const lines = [];
    for (const name of names) {
      const runs = [...(this.metrics.get(name)?.runs.values() || [])].sort((a, b) => a.key - b.key);
      for (const run of runs) {
        const label = [names.length > 1 || runs.length === 1 ? name : null, runs.length > 1 ? runLabel(run) : null];
        lines.push({
          label: label.filter(Boolean).join(" · "),
          color:
            names.length > 1
              ? COLORS[lines.length % COLORS.length]
              : runs.length === 1
                ? this.metrics.get(name).color
                : COLORS[runs.indexOf(run) % COLORS.length],
          dash: run.attempt > 1 ? [6, 4] : undefined,
          points: [...run.byStep.values()].sort((a, b) => a.step - b.step),
        });
      }
    }
    return lines;
  }

  flush() {
    this.frame = null;
    for (const metric of this.metrics.values()) {
      const touched = metric.dirty || metric.rebuild || metric.overlays.some((n) => this.metrics.get(n)?.dirty);
      if (!touched) continue;
      const lines = this.linesOf(metric);
      const plot = plotData(lines, this.settings, Number.isFinite(this.t0) ? this.t0 : 0);
      if (metric.rebuild || !metric.chart) {
        metric.chart?.destroy();
        const hooks = { setScale: [(u, key) => key === "x" && this.zoomed(metric, u)] };
        metric.zoom = null;
        metric.chart = new uPlot(options(plot, this.settings, this.width(metric), { hooks }), plot.data, metric.plot);
        hideRawInLegend(metric.chart, plot.raw);
        metric.rebuild = false;
      } else metric.chart.setData(plot.data, !metric.zoom); // a zoomed chart keeps its range
      metric.value.textContent = formatNumber(metric.latest);
      metric.card.dataset.points = String(Math.max(...[...metric.runs.values()].map((run) => run.byStep.size)));
      metric.card.dataset.runs = String(metric.runs.size);
      metric.card.dataset.series = String(lines.length);
      metric.card.dataset.lines = String(plot.series.length - 1);
      metric.card.dataset.drawn = `${this.settings.x}/${this.settings.y}/${this.settings.smoothing}`;
    }
    for (const metric of this.metrics.values()) metric.dirty = false;
  }

  // The x range the chart shows, when narrower than its data's (a zoom or a pan); once it has
  // settled for a moment, its points at the chart's resolution.
  zoomed(metric, u) {
    const xs = u.data[0];
    const { min, max } = u.scales.x;
    metric.zoom = xs.length && (min > xs[0] || max < xs[xs.length - 1]) ? { min, max } : null;
    metric.card.dataset.zoom = metric.zoom ? `${min}:${max}` : "";
    clearTimeout(metric.settle);
    if (metric.zoom && this.loadRange) metric.settle = setTimeout(() => this.fill(metric), SETTLE_MS);
  }

  // Shift + wheel (or a sideways wheel) moves a zoomed chart's range by a part of its width.
  pan(metric, event) {
    const sideways = Math.abs(event.deltaX) > Math.abs(event.deltaY);
    if (!metric.zoom || !metric.chart || !(event.shiftKey || sideways)) return;
    event.preventDefault();
    const { min, max } = metric.zoom;
    const delta = ((sideways ? event.deltaX : event.deltaY) > 0 ? 1 : -1) * (max - min) * PAN_FRACTION;
    metric.chart.setScale("x", { min: min + delta, max: max + delta });
  }

  // The points of the zoomed range, read again finer: the seqs from each line's last point
  // before the range to its first after it (every point of the range lies between).
  async fill(metric) {
    const { min, max } = metric.zoom || {};
    if (min === undefined) return;
    const xOf = xOfPoint(this.settings, Number.isFinite(this.t0) ? this.t0 : 0);
    let after = Infinity;
    let until = -Infinity;
    for (const line of this.linesOf(metric)) {
      const xs = line.points.map((p) => xOf(p, line));
      const first = xs.findIndex((x) => x >= min);
      if (first < 0) continue;
      let last = xs.findLastIndex((x) => x <= max);
      if (last < first) last = first; // no point inside: the two around the range
      after = Math.min(after, line.points[Math.max(0, first - 1)].seq - 1);
      until = Math.max(until, line.points[Math.min(xs.length - 1, last + 1)].seq);
    }
    const key = `${after}:${until}`;
    if (!(until > after) || metric.filled === key) return;
    metric.filled = key;
    for (const name of [metric.name, ...metric.overlays]) {
      for (const point of await this.loadRange(name, Math.max(0, after), until)) this.add(point);
    }
    metric.card.dataset.filled = key;
  }

  width(metric) {
    return Math.max(200, Math.floor(metric.plot.clientWidth || this.container.clientWidth || 300));
  }

  resize() {
    for (const metric of this.metrics.values()) {
      if (metric.chart) metric.chart.setSize({ width: this.width(metric), height: HEIGHT });
    }
  }

  destroy() {
    if (this.frame !== null) cancelAnimationFrame(this.frame);
    this.observer.disconnect();
    this.unsubscribe();
    for (const metric of this.metrics.values()) metric.chart?.destroy();
  }
}

export function byName(a, b) {
  const rank = (name) => (name === "loss" ? 0 : name.includes("loss") ? 1 : 2);
  return rank(a) - rank(b) || a.localeCompare(b);
}

// "attempt 2", "attempt 2, restart 1": the line of one run.
export function runLabel(run) {
  return run.restart ? `attempt ${run.attempt}, restart ${run.restart}` : `attempt ${run.attempt}`;
}

// uPlot's options for `plotData`'s answer: the x axis of the mode, linear or log y, drag to
// zoom on x (double click resets). `legend: false` for a page that draws one legend for all.
export function options(plot, settings, width, { legend = true, hooks } = {}) {
  return {
    width,
    height: HEIGHT,
    scales: { x: { time: settings.x === "wall" }, y: settings.y === "log" ? { distr: 3, log: 10 } : {} },
    cursor: { drag: { x: true, y: false } },
    legend: { show: legend, live: true },
    hooks,
    axes: [
      { ...AXIS, labelSize: 20, ...xAxis(settings) },
      { ...AXIS, size: 60, values: (_u, splits) => splits.map((v) => (v === null ? "" : formatNumber(v))) },
    ],
    series: plot.series,
  };
}

// The raw lines drawn under smoothed ones are not named in the legend: the smoothed one is.
export function hideRawInLegend(chart, raw) {
  const rows = chart.root.querySelectorAll(".u-legend .u-series");
  for (const index of raw) if (rows[index]) rows[index].hidden = true;
}
