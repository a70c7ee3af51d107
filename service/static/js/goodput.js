// Where a job's time went (GET /v1/jobs/{id}/goodput, docs/goodput.md): one stacked bar of its
// parts, training in green, each part's share on hover and in the legend under it.

import { api } from "./api.js";
import { formatDuration, h } from "./dom.js";

const LIST_REFRESH_MS = 30_000; // a running job's bar in a list, read again at most this often
const LIST_READS = 4; // reads at once

// In the order a job lives them; the colours stay the same on every page.
export const PARTS = {
  queued: "#cbd5e1",
  environment: "#a78bfa",
  launch: "#60a5fa",
  first_step: "#38bdf8",
  training: "#16a34a",
  checkpoint_stall: "#f59e0b",
  eval: "#14b8a6",
  hang: "#b91c1c",
  lost_work: "#ef4444",
  retry_gap: "#f97316",
  teardown: "#64748b",
};

export function percent(fraction) {
  return fraction === null || fraction === undefined || !Number.isFinite(fraction)
    ? "—"
    : `${(100 * fraction).toFixed(fraction < 0.1 ? 1 : 0)} %`;
}

// Device time as a person reads it: hours once there is a tenth of one.
export function deviceTime(seconds) {
  const hours = (seconds || 0) / 3600;
  return hours >= 0.1 ? `${hours.toFixed(1)} device-hours` : `${Math.round(seconds || 0)} device-seconds`;
}

// The bar alone (a row of the jobs list), or with a headline (given, or the job's own) and a
// legend (the job page, the goodput page).
export function goodputBar(answer, { compact = false, headline = null } = {}) {
  const wall = answer.wall_s || 0;
  const parts = answer.parts.filter((part) => part.seconds > 0);
  const share = (part) => (wall > 0 ? part.seconds / wall : 0);
  const describe = (part) =>
    `${part.name}: ${formatDuration(part.seconds)} (${percent(share(part))})${part.detail ? ` · ${part.detail}` : ""}`;
  const bar = h(
    "div",
    {
      class: compact ? "goodput-bar compact" : "goodput-bar",
      role: "img",
      "aria-label": `goodput ${percent(answer.goodput)}: ${parts.map(describe).join("; ")}`,
      dataset: { goodput: String(answer.goodput ?? "") },
    },
    parts.map((part) =>
      h("span", {
        class: "goodput-part",
        title: describe(part),
        dataset: { part: part.name, seconds: String(part.seconds) },
        style: `width: ${100 * share(part)}%; background: ${PARTS[part.name] || "#94a3b8"}`,
      }),
    ),
  );
  if (compact) return bar;
  return h(
    "div",
    { class: "goodput" },
    h(
      "p",
      { class: "goodput-headline" },
      h("strong", {}, `Goodput ${percent(answer.goodput)}`),
      headline ?? ` of ${deviceTime(answer.device_s)} held, over ${formatDuration(wall)}`,
    ),
    bar,
    h(
      "ul",
      { class: "goodput-legend small" },
      parts.map((part) =>
        h(
          "li",
          { dataset: { part: part.name }, title: part.detail || "" },
          h("span", { class: "swatch", style: `background: ${PARTS[part.name] || "#94a3b8"}` }),
          `${part.name.replace("_", " ")} ${formatDuration(part.seconds)} · ${percent(share(part))}`,
        ),
      ),
    ),
  );
}

// The bars of a list's rows: an ended job's read once (its ledger no longer changes), another's
// again at most every LIST_REFRESH_MS, a few reads at a time.
export class GoodputBars {
  constructor(signal) {
    this.signal = signal;
    this.read = new Map(); // job id -> { at, final }
    this.waiting = [];
    this.reading = 0;
  }

  update(id, into) {
    const seen = this.read.get(id);
    if (seen && (seen.final || Date.now() - seen.at < LIST_REFRESH_MS)) return;
    this.read.set(id, { at: Date.now(), final: false });
    this.waiting.push(async () => {
      const answer = await api.getGoodput(id, this.signal);
      this.read.set(id, { at: Date.now(), final: answer.final === true });
      into.replaceChildren(goodputBar(answer, { compact: true }));
    });
    this.next();
  }

  next() {
    while (this.reading < LIST_READS && this.waiting.length) {
      const read = this.waiting.shift();
      this.reading += 1;
      read()
        .catch(() => {})
        .finally(() => {
          this.reading -= 1;
          this.next();
        });
    }
  }
}
