// One live uPlot chart per metric name, value against step, redrawn at most once a frame.

import uPlot from "../vendor/uplot/uPlot.esm.js";
import { formatNumber, h } from "./dom.js";

export const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4d7c0f"];
export const HEIGHT = 200;
export const AXIS = { stroke: "#475569", grid: { stroke: "#e2e8f0", width: 1 }, ticks: { stroke: "#cbd5e1" } };

export class MetricCharts {
  constructor(container) {
    this.container = container;
    this.metrics = new Map();
    this.frame = null;
    this.observer = new ResizeObserver(() => this.resize());
    this.observer.observe(container);
  }

  // A point of GET /metrics or of a `metric` event. A retry that resumes from a checkpoint
  // reports some steps again: the later value replaces the earlier one.
  add(point) {
    const metric = this.metrics.get(point.name) || this.create(point.name);
    const x = point.step ?? point.seq;
    const last = metric.xs.length ? metric.xs[metric.xs.length - 1] : -Infinity;
    if (metric.byX.has(x) || x <= last) metric.rebuild = true;
    else {
      metric.xs.push(x);
      metric.ys.push(point.value);
    }
    metric.byX.set(x, point.value);
    metric.latest = point.value;
    metric.dirty = true;
    this.schedule();
  }

  create(name) {
    const value = h("span", { class: "chart-value" });
    const plot = h("div", { class: "chart-plot" });
    const card = h(
      "figure",
      { class: "chart", dataset: { metric: name, points: "0" } },
      h("figcaption", {}, h("span", { class: "chart-name" }, name), value),
      plot,
    );
    const metric = { name, byX: new Map(), xs: [], ys: [], card, plot, value, chart: null };
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
      if (metric.rebuild) {
        metric.xs = [...metric.byX.keys()].sort((a, b) => a - b);
        metric.ys = metric.xs.map((x) => metric.byX.get(x));
        metric.rebuild = false;
      }
      const data = [metric.xs.slice(), metric.ys.slice()];
      if (metric.chart) metric.chart.setData(data);
      else metric.chart = new uPlot(options(metric, this.width(metric)), data, metric.plot);
      metric.value.textContent = formatNumber(metric.latest);
      metric.card.dataset.points = String(metric.xs.length);
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

function options(metric, width) {
  return {
    width,
    height: HEIGHT,
    scales: { x: { time: false } },
    cursor: { drag: { x: true, y: false } },
    // The caption names the metric and its latest value: a legend would only repeat them.
    legend: { show: false },
    axes: [
      { ...AXIS, label: "step", labelSize: 20 },
      { ...AXIS, size: 60, values: (_u, splits) => splits.map(formatNumber) },
    ],
    series: [
      { label: "step" },
      {
        label: metric.name,
        stroke: metric.color,
        width: 2,
        value: (_u, v) => formatNumber(v),
        points: { size: 5 },
      },
    ],
  };
}
