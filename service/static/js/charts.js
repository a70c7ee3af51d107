// One live uPlot chart per metric name, value against step, redrawn at most once a frame.

import uPlot from "../vendor/uplot/uPlot.esm.js";
import { formatNumber, h } from "./dom.js";

export const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4d7c0f"];
export const HEIGHT = 200;
export const AXIS = { stroke: "#475569", grid: { stroke: "#e2e8f0", width: 1 }, ticks: { stroke: "#cbd5e1" } };

// Each run of the job is a line of its own: an attempt (a retry that resumes from a checkpoint
// reports its steps again) and, within an attempt, each elastic restart (the restart event's
// seq divides the attempt's points). With more than one, a legend names them.
export class MetricCharts {
  constructor(container) {
    this.container = container;
    this.metrics = new Map();
    this.restarts = new Map(); // attempt -> seqs of its restart events
    this.frame = null;
    this.observer = new ResizeObserver(() => this.resize());
    this.observer.observe(container);
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
      line = { ...run, byX: new Map(), ys: metric.xs.map(() => null) };
      metric.runs.set(run.key, line);
      metric.rebuild = true; // a new series: the chart is made again
    }
    const x = point.step ?? point.seq;
    const last = metric.xs.length ? metric.xs[metric.xs.length - 1] : -Infinity;
    if (!metric.index.has(x)) {
      if (x > last) {
        metric.index.set(x, metric.xs.length);
        metric.xs.push(x);
        for (const other of metric.runs.values()) other.ys.push(null);
      } else metric.rebuild = true;
    }
    if (!metric.rebuild) line.ys[metric.index.get(x)] = point.value;
    line.byX.set(x, point.value);
    metric.latest = point.value;
    metric.dirty = true;
    this.schedule();
  }

  create(name) {
    const value = h("span", { class: "chart-value" });
    const plot = h("div", { class: "chart-plot" });
    const card = h(
      "figure",
      { class: "chart", dataset: { metric: name, points: "0", runs: "0" } },
      h("figcaption", {}, h("span", { class: "chart-name" }, name), value),
      plot,
    );
    const metric = { name, runs: new Map(), xs: [], index: new Map(), card, plot, value, chart: null };
    metric.color = COLORS[this.metrics.size % COLORS.length];
    this.metrics.set(name, metric);
    const order = [...this.metrics.keys()].sort(byName);
    const next = order[order.indexOf(name) + 1];
    this.container.insertBefore(card, next ? this.metrics.get(next).card : null);
    this.container.dataset.charts = String(this.metrics.size);
    return metric;
  }

  schedule() {
    if (this.frame === null) this.frame = requestAnimationFrame(() => this.flush());
  }

  flush() {
    this.frame = null;
    for (const metric of this.metrics.values()) {
      if (!metric.dirty) continue;
      metric.dirty = false;
      const runs = [...metric.runs.values()].sort((a, b) => a.key - b.key);
      if (metric.rebuild) {
        metric.xs = [...new Set(runs.flatMap((run) => [...run.byX.keys()]))].sort((a, b) => a - b);
        metric.index = new Map(metric.xs.map((x, i) => [x, i]));
        for (const run of runs) run.ys = metric.xs.map((x) => (run.byX.has(x) ? run.byX.get(x) : null));
        metric.chart?.destroy();
        metric.chart = null;
        metric.rebuild = false;
      }
      const data = [metric.xs.slice(), ...runs.map((run) => run.ys.slice())];
      if (metric.chart) metric.chart.setData(data);
      else metric.chart = new uPlot(options(metric, runs, this.width(metric)), data, metric.plot);
      metric.value.textContent = formatNumber(metric.latest);
      metric.card.dataset.points = String(Math.max(...runs.map((run) => run.byX.size)));
      metric.card.dataset.runs = String(runs.length);
    }
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

function options(metric, runs, width) {
  // One run: the caption names the metric and its latest value, a legend would only repeat
  // them. Several: the legend names each run's line.
  const many = runs.length > 1;
  return {
    width,
    height: HEIGHT,
    scales: { x: { time: false } },
    cursor: { drag: { x: true, y: false } },
    legend: { show: many, live: false },
    axes: [
      { ...AXIS, label: "step", labelSize: 20 },
      { ...AXIS, size: 60, values: (_u, splits) => splits.map(formatNumber) },
    ],
    series: [
      { label: "step" },
      ...runs.map((run, i) => ({
        label: many ? runLabel(run) : metric.name,
        stroke: many ? COLORS[i % COLORS.length] : metric.color,
        width: 2,
        spanGaps: true,
        value: (_u, v) => formatNumber(v),
        points: { size: 5 },
      })),
    ],
  };
}
