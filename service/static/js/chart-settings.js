// How charts are drawn, shared by every chart of a page and kept for the tab: the x axis (step,
// wall time, time since the first point), a linear or log y axis, and EMA smoothing (the raw
// line stays, faint). Also the pure parts: the smoothing and the lines put on one x axis.

import { formatDuration, formatNumber, formatTime, h } from "./dom.js";

const KEY = "launchbay.charts";
export const X_MODES = { step: "step", wall: "wall time", relative: "relative time" };

export class ChartSettings {
  constructor() {
    const saved = JSON.parse(sessionStorage.getItem(KEY) || "{}");
    this.x = saved.x in X_MODES ? saved.x : "step";
    this.y = saved.y === "log" ? "log" : "linear";
    this.smoothing = Math.min(0.99, Math.max(0, Number(saved.smoothing) || 0));
    this.listeners = new Set();
  }

  onChange(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  set(changes) {
    Object.assign(this, changes);
    sessionStorage.setItem(KEY, JSON.stringify({ x: this.x, y: this.y, smoothing: this.smoothing }));
    for (const listener of this.listeners) listener();
  }

  // The bar above a page's charts.
  toolbar() {
    const select = (id, label, options, value, key) =>
      h(
        "label",
        { class: "filter" },
        `${label} `,
        h(
          "select",
          { id, onchange: (event) => this.set({ [key]: event.target.value }) },
          Object.entries(options).map(([v, text]) => h("option", { value: v, selected: v === value }, text)),
        ),
      );
    const shown = h("output", { id: "chart-smoothing-value", class: "mono small" }, this.smoothing.toFixed(2));
    const slider = h("input", {
      type: "range",
      id: "chart-smoothing",
      min: "0",
      max: "0.99",
      step: "0.01",
      value: String(this.smoothing),
      "aria-label": "smoothing (EMA weight)",
      oninput: (event) => {
        shown.textContent = Number(event.target.value).toFixed(2);
        this.set({ smoothing: Number(event.target.value) });
      },
    });
    return h(
      "div",
      { class: "toolbar chart-controls", id: "chart-controls" },
      select("chart-x", "X axis", X_MODES, this.x, "x"),
      select("chart-y", "Y axis", { linear: "linear", log: "log" }, this.y, "y"),
      h("label", { class: "filter" }, "Smoothing ", slider, shown),
    );
  }
}

// TensorBoard's smoothing: an exponential moving average, debiased so the first points are not
// pulled towards zero. `weight` 0 is the raw line.
export function ema(values, weight) {
  if (!weight) return values.slice();
  let last = 0;
  let n = 0;
  return values.map((value) => {
    if (value === null || !Number.isFinite(value)) return null;
    n += 1;
    last = last * weight + (1 - weight) * value;
    return last / (1 - weight ** n);
  });
}

// A point's x on the axis the settings choose (`line.t0` or the page's `t0` for relative time).
export function xOfPoint(settings, t0) {
  return {
    step: (p) => p.step,
    wall: (p) => p.ts,
    relative: (p, line) => p.ts - (line.t0 ?? t0),
  }[settings.x];
}

// Lines ({label, color, dash, t0?, points: [{step, ts, value}] in step order}) on one x axis, as
// uPlot's data and series. With smoothing, each line is drawn twice: raw (faint, not in the
// legend) and smoothed. `meta` gives each x's step and time for the hover read-out.
export function plotData(lines, settings, t0) {
  // Relative time starts at the line's own `t0` where it has one (each run of a compare
  // page), else at the page's.
  const xOf = xOfPoint(settings, t0);
  const meta = new Map();
  for (const line of lines) {
    for (const p of line.points) {
      const x = xOf(p, line);
      if (x !== null && x !== undefined && !meta.has(x)) meta.set(x, { ...p, t0: line.t0 ?? t0 });
    }
  }
  const xs = [...meta.keys()].sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const positive = (v) => (settings.y === "log" && !(v > 0) ? null : v);
  const data = [xs];
  const series = [{ label: X_MODES[settings.x], value: (_u, x) => describeX(x, meta.get(x)) }];
  const raw = [];
  for (const line of lines) {
    const values = line.points.map((p) => p.value);
    const aligned = (ys) => {
      const column = new Array(xs.length).fill(null);
      line.points.forEach((p, i) => {
        const at = index.get(xOf(p, line));
        if (at !== undefined) column[at] = positive(ys[i]);
      });
      return column;
    };
    const style = { spanGaps: true, dash: line.dash, value: (_u, v) => formatNumber(v), points: { size: 4 } };
    if (settings.smoothing > 0) {
      raw.push(series.length);
      data.push(aligned(values));
      series.push({ ...style, label: `${line.label} (raw)`, stroke: `${line.color}40`, width: 1, points: { show: false } });
    }
    data.push(aligned(ema(values, settings.smoothing)));
    series.push({ ...style, label: line.label, stroke: line.color, width: 2 });
  }
  return { data, series, raw, meta };
}

// The x of the hover read-out: step and time, whichever the axis shows.
function describeX(x, point) {
  if (x === null || x === undefined || !point) return "—";
  const step = point.step === null || point.step === undefined ? null : `step ${point.step}`;
  const time = formatTime(point.ts * 1000);
  const since = `+${formatDuration(point.ts - point.t0)}`;
  return [step, time, since].filter(Boolean).join(" · ");
}

// The x axis's tick labels and title for the mode.
export function xAxis(settings) {
  if (settings.x === "wall") return { label: "wall time (UTC)" };
  if (settings.x === "relative") {
    return { label: "time since the first point", space: 60, values: (_u, splits) => splits.map(shortDuration) };
  }
  return { label: "step" };
}

// "45s", "8m20s", "2h05m": a tick label.
function shortDuration(seconds) {
  if (seconds === null || seconds < 0) return "";
  if (seconds < 60) return `${Math.round(seconds)}s`;
  const m = Math.floor(seconds / 60);
  const s = Math.round(seconds % 60);
  if (m < 60) return s ? `${m}m${String(s).padStart(2, "0")}s` : `${m}m`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, "0")}m`;
}
