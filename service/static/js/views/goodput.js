// Where the device-hours went, for an owner or a queue over a period (GET /v1/goodput): the
// period's goodput and its badput by part as one stacked bar, one bar per day (or per slice of a
// longer period) below it, the owners, and the jobs that lost most.

import { api } from "../api.js";
import { h, formatTime } from "../dom.js";
import { PARTS, deviceTime, goodputBar, percent } from "../goodput.js";

const FILTERS = ["owner", "queue", "since"];
const PERIODS = { "1d": 1, "7d": 7, "14d": 14, "30d": 30 };
const SLICES = 14; // bars over time, at most (a day's: one an hour)
const HOUR_MS = 3600 * 1000;
const DAY_MS = 24 * HOUR_MS;

// GET /v1/goodput's answer as the bar's parts: device-hours trained and each badput part's.
export function summaryParts(answer) {
  return {
    wall_s: answer.device_hours * 3600,
    device_s: answer.device_hours * 3600,
    goodput: answer.goodput,
    parts: [
      { name: "training", seconds: answer.trained_device_hours * 3600, detail: null },
      ...answer.badput.map((part) => ({ name: part.name, seconds: part.device_hours * 3600, detail: null })),
    ].sort((a, b) => Object.keys(PARTS).indexOf(a.name) - Object.keys(PARTS).indexOf(b.name)),
  };
}

export async function renderGoodput(ctx) {
  const query = Object.fromEntries(FILTERS.map((key) => [key, ctx.route.query.get(key) || ""]));
  const days = PERIODS[query.since] ?? 7;
  const go = (changes) => {
    const next = new URLSearchParams();
    for (const key of FILTERS) {
      const value = key in changes ? changes[key] : query[key];
      if (value) next.set(key, value);
    }
    location.hash = `#/goodput${next.toString() ? `?${next}` : ""}`;
  };
  const text = (key, label, placeholder) =>
    h(
      "label",
      { class: "filter" },
      `${label} `,
      h("input", {
        type: "search",
        id: `goodput-${key}`,
        value: query[key],
        placeholder,
        size: 12,
        onchange: (event) => go({ [key]: event.target.value.trim() }),
      }),
    );
  const owner = text("owner", "Owner", "anyone");
  owner.hidden = true;
  api.isAdmin(ctx.signal).then((admin) => { owner.hidden = !admin; }).catch(() => {});
  const period = h(
    "select",
    { id: "goodput-since", onchange: (event) => go({ since: event.target.value }) },
    Object.keys(PERIODS).map((key) => h("option", { value: key, selected: PERIODS[key] === days }, `last ${key}`)),
  );
  const headline = h("div", { id: "goodput-period" });
  const overTime = h("ol", { class: "goodput-days", id: "goodput-days" });
  const owners = h("div", { id: "goodput-owners" });
  const lost = h("div", { id: "goodput-lost" });
  ctx.root.append(
    h(
      "section",
      { class: "goodput-page" },
      h("div", { class: "toolbar" }, h("h1", {}, "Goodput")),
      h(
        "div",
        { class: "toolbar filters" },
        h("label", { class: "filter" }, "Period ", period),
        text("queue", "Queue", "any queue"),
        owner,
      ),
      headline,
      h("h2", {}, "Over time"),
      overTime,
      h("h2", {}, "Owners"),
      owners,
      h("h2", {}, "The jobs that lost most"),
      lost,
    ),
  );

  const base = { owner: query.owner || undefined, queue: query.queue || undefined };
  const whole = await api.getGoodputSummary({ ...base, since: `${days}d` }, ctx.signal);
  const held = ` of ${deviceTime(whole.device_hours * 3600)} held by ${whole.jobs} job${whole.jobs === 1 ? "" : "s"}, ${deviceTime(whole.trained_device_hours * 3600)} trained`;
  headline.replaceChildren(goodputBar(summaryParts(whole), { headline: held }));
  owners.replaceChildren(ownerTable(whole.owners));
  lost.replaceChildren(lostTable(whole.lost_most));

  // One bar per slice of the period, oldest first, each as wide as its device-hours; slices
  // of whole hours (a day's period) or days, in UTC; the last one, up to now, counts running
  // jobs so far.
  const unit = days === 1 ? HOUR_MS : DAY_MS * Math.ceil(days / SLICES);
  const count = Math.ceil((days * DAY_MS) / unit);
  const end = Math.ceil(Date.now() / unit) * unit;
  const answers = await Promise.all(
    Array.from({ length: count }, (_, i) => {
      const since = new Date(end - (count - i) * unit).toISOString();
      const until = i === count - 1 ? undefined : new Date(end - (count - i - 1) * unit).toISOString();
      return api.getGoodputSummary({ ...base, since, until, top: 1 }, ctx.signal).then((answer) => [since, answer]);
    }),
  );
  const most = Math.max(1e-9, ...answers.map(([, answer]) => answer.device_hours));
  overTime.replaceChildren(
    ...answers.map(([since, answer]) =>
      h(
        "li",
        { dataset: { since, goodput: String(answer.goodput) } },
        h("span", { class: "goodput-day mono small" }, formatTime(since).slice(days === 1 ? 11 : 0, days === 1 ? 16 : 10)),
        h(
          "span",
          { class: "goodput-day-bar", style: `width: ${(100 * answer.device_hours) / most}%` },
          answer.device_hours > 0 ? goodputBar(summaryParts(answer), { compact: true }) : null,
        ),
        h("span", { class: "small" }, answer.device_hours > 0 ? `${percent(answer.goodput)} of ${deviceTime(answer.device_hours * 3600)}` : "—"),
      ),
    ),
  );
}

function table(columns, rows) {
  if (!rows.length) return h("p", { class: "muted" }, "None in this period.");
  return h(
    "table",
    { class: "goodput-table" },
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, rows),
  );
}

function ownerTable(owners) {
  return table(
    ["Owner", "Jobs", "Device-hours", "Trained", "Goodput"],
    owners.map((o) =>
      h(
        "tr",
        { dataset: { owner: o.owner } },
        h("td", {}, h("a", { href: `#/goodput?owner=${encodeURIComponent(o.owner)}` }, o.owner || "(no owner)")),
        h("td", {}, String(o.jobs)),
        h("td", { class: "mono" }, o.device_hours.toFixed(2)),
        h("td", { class: "mono" }, o.trained_device_hours.toFixed(2)),
        h("td", {}, percent(o.goodput)),
      ),
    ),
  );
}

function lostTable(jobs) {
  return table(
    ["Job", "Owner", "Queue", "State", "Device-hours lost", "Goodput"],
    jobs.map((j) =>
      h(
        "tr",
        { dataset: { jobId: j.job_id } },
        h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(j.job_id)}` }, j.name)),
        h("td", {}, j.owner),
        h("td", {}, j.queue),
        h("td", {}, j.state),
        h("td", { class: "mono" }, j.badput_device_hours.toFixed(2)),
        h("td", {}, percent(j.goodput)),
      ),
    ),
  );
}
