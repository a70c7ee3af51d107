// One job: state timeline, live metric charts, per-rank logs, checkpoints, the nodes of a
// multi-node job and its spec. It opens in the same time however long the job ran: the
// timeline, the charts (downsampled on the server) and the logs' tail are read first, then
// GET /v1/jobs/{id}/events is followed from there (resumed with Last-Event-ID when it drops).

import { api } from "../api.js";
import { ChartSettings } from "../chart-settings.js";
import { MetricCharts } from "../charts.js";
import { CheckpointTable } from "../checkpoints.js";
import { goodputBar } from "../goodput.js";
import { TERMINAL, describeError, firstLine, formatDuration, formatTime, h, parseTime, stateBadge } from "../dom.js";
import { LogViewer } from "../logs.js";
import { DeliveriesPanel, StacksPanel } from "../operations.js";
import { EventStream } from "../sse.js";
import { dump } from "../../vendor/js-yaml/js-yaml.esm.min.js";
import { cancelButton, progressCell } from "./jobs.js";

const REFRESH_MS = 3000;

export async function renderJob(ctx) {
  // The URL may name the job by a prefix of its id, its name or name@N (the API resolves
  // it); every later call uses the id it resolved to, so `#/jobs/name@1` stays this job.
  const [ref] = ctx.params;
  let job = await api.getJob(ref, ctx.signal);
  const id = job.id;

  const badge = h("span", { id: "job-state" });
  const streamStatus = h("span", { class: "stream-status small", id: "stream-status" });
  const cancel = cancelButton(id, () => refreshJob());
  const summary = h("dl", { class: "summary" });
  const timeline = h("ol", { class: "timeline", id: "timeline" });
  const charts = h("div", { class: "charts", id: "charts" });
  // What Launchbay measured of the job (its GPUs), apart from the program's own metrics.
  const systemCharts = h("div", { class: "charts", id: "system-charts" });
  const noMetrics = h("p", { class: "muted", id: "no-metrics" }, noMetricsText(job));
  const chartSettings = new ChartSettings();
  const chartControls = chartSettings.toolbar();
  chartControls.hidden = true; // until a metric comes
  const logBox = h("div", { id: "logs" });
  const checkpointBox = h("div", { id: "checkpoints" });
  const goodputBox = h("div", { id: "goodput-panel" }, h("p", { class: "muted" }, "…"));
  const multiNode = (job.spec.nnodes || 1) > 1;
  const nodeBox = h("div", { id: "nodes" });
  const stacksBox = h("div", { id: "stacks-panel" });
  const deliveriesBox = h("div", { id: "deliveries-panel" });
  const spec = h("pre", { class: "spec", id: "spec" }, dump(job.spec));
  const resubmit = h(
    "button",
    {
      type: "button",
      class: "small",
      onclick: () => {
        sessionStorage.setItem("launchbay.draft", spec.textContent);
        location.hash = "#/submit?mode=yaml";
      },
    },
    "Edit and submit again",
  );

  ctx.root.append(
    h(
      "article",
      { class: "job-page", dataset: { jobId: id } },
      h("a", { href: "#/jobs", class: "back small" }, "← Jobs"),
      h(
        "div",
        { class: "job-head" },
        h("h1", { id: "job-name" }, job.name),
        badge,
        streamStatus,
        h("span", { class: "spacer" }),
        cancel,
      ),
      summary,
      section("Timeline", timeline),
      section("Goodput", goodputBox),
      section("Metrics", chartControls, noMetrics, charts),
      section("System", systemCharts),
      section("Logs", logBox),
      section("Checkpoints", checkpointBox),
      multiNode ? section("Nodes", nodeBox) : null,
      section("Stacks", stacksBox),
      section("Webhook deliveries", deliveriesBox),
      section("Spec", h("div", { class: "spec-bar" }, resubmit), spec),
    ),
  );

  const metricCharts = new MetricCharts(charts, chartSettings, {
    loadRange: async (name, after, until) =>
      (await api.listMetrics(id, { name, max_points: CHART_POINTS, after, until }, ctx.signal)).items,
  });
  const systemMetricCharts = new MetricCharts(systemCharts, SYSTEM_CHART_SETTINGS);
  const systemPanel = systemCharts.closest("section");
  systemPanel.hidden = true; // until a system metric comes (a job that holds GPUs)
  // A point of GET /metrics or of a `metric` event, to the charts of its group.
  const addPoint = (point) => {
    if (isSystemMetric(point.name)) {
      systemPanel.hidden = false;
      systemMetricCharts.add(point);
      return;
    }
    noMetrics.hidden = true;
    chartControls.hidden = false;
    metricCharts.add(point);
  };
  const logs = new LogViewer(logBox);
  const checkpoints = new CheckpointTable(checkpointBox, job);
  const stacks = new StacksPanel(stacksBox, id);
  const deliveries = new DeliveriesPanel(deliveriesBox, id);
  const refreshOperations = () => {
    stacks.setRunning(["starting", "running"].includes(job.state));
    stacks.refresh(ctx.signal).catch(() => {});
    deliveries.refresh(ctx.signal).catch(() => {});
  };
  ctx.onCleanup(() => metricCharts.destroy());
  ctx.onCleanup(() => systemMetricCharts.destroy());
  const world = job.spec.launcher === "python" ? 1 : (job.spec.nnodes || 1) * (job.spec.nproc_per_node || 1);
  logs.expectRanks(world);

  const show = () => {
    badge.replaceChildren(stateBadge(job.state));
    cancel.hidden = TERMINAL.has(job.state) || job.state === "cancelling";
    summary.replaceChildren(...summaryItems(job));
    noMetrics.textContent = noMetricsText(job);
    logs.setEnded(TERMINAL.has(job.state));
  };
  // Where the job's time went so far; read again with the job, at most every REFRESH_MS.
  let goodputRead = 0;
  const refreshGoodput = async () => {
    if (Date.now() - goodputRead < REFRESH_MS && !TERMINAL.has(job.state)) return;
    goodputRead = Date.now();
    goodputBox.replaceChildren(goodputBar(await api.getGoodput(id, ctx.signal)));
  };
  const refreshNodes = async () => {
    if (multiNode) nodeBox.replaceChildren(nodeTable((await api.listNodes(id, ctx.signal)).items));
  };
  const refreshJob = async () => {
    job = await api.getJob(id, ctx.signal);
    show();
    refreshNodes().catch(() => {});
    refreshGoodput().catch(() => {});
    refreshOperations();
    return job;
  };
  show();
  refreshOperations();
  checkpoints.refresh(ctx.signal).catch(() => {});
  refreshNodes().catch(() => {});
  refreshGoodput().catch(() => {});

  const cursors = await loadHistory(id, ctx.signal, { timeline, metricCharts, addPoint, logs });
  chartControls.hidden = !noMetrics.hidden;

  let pending = null;
  const refreshSoon = () => {
    if (pending) return;
    pending = setTimeout(async () => {
      pending = null;
      await Promise.all([refreshJob(), checkpoints.refresh(ctx.signal)]).catch(() => {});
    }, 150);
  };
  const stream = new EventStream(api.eventsPath(id), {
    onEvent: ({ id: seq, event, data }) => {
      if (Number(seq) <= (cursors[event] ?? cursors.timeline)) return; // already drawn
      if (event === "metric") addPoint(data);
      else if (event === "log") logs.add(data);
      else if (TIMELINE_EVENTS.has(event)) {
        if (event === "restart") metricCharts.addRestart(data.attempt, Number(seq));
        addTimelineItem(timeline, event, data);
        refreshSoon();
      } else if (event === "checkpoint") refreshSoon();
    },
    onStatus: (status) => {
      streamStatus.textContent = { connecting: "connecting…", live: "● live", reconnecting: "reconnecting…", ended: "" }[status];
      streamStatus.dataset.status = status;
    },
    onError: (err, fatal) => {
      if (fatal) streamStatus.textContent = `live updates stopped: ${describeError(err)}`;
    },
    isFinished: async () => TERMINAL.has((await refreshJob()).state),
  });
  stream.lastEventId = String(Math.min(cursors.timeline, cursors.metric, cursors.log));
  stream.start();
  ctx.onCleanup(() => stream.close());

  const timer = setInterval(() => {
    if (!TERMINAL.has(job.state)) refreshJob().catch(() => {});
  }, REFRESH_MS);
  ctx.onCleanup(() => clearInterval(timer));
  ctx.onCleanup(() => clearTimeout(pending));
}

const CHART_POINTS = 1000;
// Events drawn on the timeline as they come.
const TIMELINE_EVENTS = new Set(["state", "restart", "checkpoint_deleted", "idle_gpu"]);
// Launchbay's own metrics (jobs/contract/system_metrics.py): GPU readings, without a step, so
// drawn against the time since the first one whatever the program's charts are set to.
const SYSTEM_PREFIX = "system/";
const isSystemMetric = (name) => name.startsWith(SYSTEM_PREFIX);
const SYSTEM_CHART_SETTINGS = { x: "relative", y: "linear", smoothing: 0, onChange: () => () => {} };
const TAIL_LINES = 200;

// What the job recorded so far, in requests whose cost does not grow with its history; the
// seq each part covers, by event name, so the stream's events up to it are skipped.
async function loadHistory(id, signal, { timeline, metricCharts, addPoint, logs }) {
  const [states, metrics, tail] = await Promise.all([
    api.getTimeline(id, signal),
    api.listMetrics(id, { max_points: CHART_POINTS }, signal),
    api.listLogs(id, { order: "desc", limit: TAIL_LINES }, signal),
  ]);
  for (const item of states.items) {
    if (item.event === "restart") metricCharts.addRestart(item.data.attempt, Number(item.id));
    addTimelineItem(timeline, item.event, item.data);
  }
  for (const point of metrics.items) addPoint(point);
  logs.prepend(tail.items);
  let before = tail.next_before ?? null;
  const older = logs.setOlder(async () => {
    const page = await api.listLogs(id, { order: "desc", limit: TAIL_LINES, before }, signal);
    logs.prepend(page.items);
    before = page.next_before ?? null;
    return before !== null;
  });
  older.hidden = before === null;
  return { timeline: states.next_after, metric: metrics.next_after, log: tail.next_after };
}

function section(title, ...children) {
  const slug = title.toLowerCase().replace(/\s+/g, "-");
  return h("section", { class: `panel panel-${slug}`, "aria-labelledby": `h-${slug}` }, h("h2", { id: `h-${slug}` }, title), children);
}

// Each attempt's nodes: the worker and host of each, who hosts the rendezvous, how it ended.
function nodeTable(nodes) {
  if (!nodes.length) return h("p", { class: "muted" }, "No node has joined yet.");
  const columns = ["Attempt", "Node", "Worker", "Host", "Rendezvous", "State", "Exit reason"];
  return h(
    "table",
    { class: "nodes" },
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, c)))),
    h(
      "tbody",
      {},
      nodes.map((n) =>
        h(
          "tr",
          { dataset: { attempt: String(n.attempt), node: String(n.node) } },
          h("td", {}, String(n.attempt)),
          h("td", {}, String(n.node)),
          h("td", { class: "mono" }, n.worker),
          h("td", {}, n.host),
          h("td", { class: "mono" }, n.endpoint || ""),
          h("td", {}, stateBadge(n.state)),
          h("td", { title: n.message || "" }, n.exit_reason || ""),
        ),
      ),
    ),
  );
}

function summaryItems(job) {
  const started = parseTime(job.started_at);
  const finished = parseTime(job.finished_at);
  const duration = started ? ((finished ?? Date.now()) - started) / 1000 : null;
  const items = [
    ["ID", h("span", { class: "mono job-id" }, job.id)],
    ["Attempt", String(job.attempt)],
    ["Worker", job.worker || "—"],
    ["Created", formatTime(job.created_at)],
    ["Started", formatTime(job.started_at)],
    ["Finished", formatTime(job.finished_at)],
    ["Duration", formatDuration(duration)],
    ["Progress", progressCell(job.progress.step, job.progress.total_steps)],
  ];
  if (job.progress.eta_s !== null && job.progress.eta_s !== undefined) {
    items.push(["Time left", h("span", { id: "job-eta", title: "at the recent step rate" }, formatDuration(job.progress.eta_s))]);
  }
  if (job.pending_reason) {
    items.push(["Queue position", String(job.queue_position)]);
    items.push(["Waiting because", h("span", { class: "pending-reason" }, job.pending_reason)]);
  }
  if (job.exit_code !== null) items.push(["Exit code", String(job.exit_code)]);
  if (job.exit_reason) items.push(["Exit reason", job.exit_reason]);
  if (job.message) items.push(["Message", h("span", { class: "message" }, job.message)]);
  if (job.warnings?.length) {
    const list = h("ul", { class: "warnings", id: "job-warnings" }, job.warnings.map((w) => h("li", {}, w)));
    items.push([`Warnings (${job.warnings.length})`, list]);
  }
  return items.map(([term, value]) => h("div", { class: "summary-item" }, h("dt", {}, term), h("dd", {}, value)));
}

const RETIRED = "checkpoint_deleted";

// One entry per state or restart; a run of `checkpoint_deleted` events (retention retiring old
// checkpoints, one per save on a long job) is one entry, "N checkpoints deleted by retention",
// that opens to list them.
function addTimelineItem(list, event, data) {
  const ts = typeof data.ts === "number" ? data.ts * 1000 : null;
  if (event === RETIRED) {
    const last = list.lastElementChild;
    const group = last?.dataset.state === RETIRED ? last : list.appendChild(retiredGroup(ts, previousTs(list)));
    addRetired(group, data);
    return;
  }
  const previous = previousTs(list);
  const delta = ts && previous ? ` (+${formatDuration((ts - previous) / 1000)})` : "";
  const details = [];
  if (event === "restart") {
    details.push(`elastic restart ${data.restart} of ${data.max_restarts}`);
  } else {
    if (data.attempt > 1 || data.state === "queued") details.push(`attempt ${data.attempt}`);
    if (data.worker) details.push(`on ${data.worker}`);
    if (data.exit_code !== undefined && data.exit_code !== null) details.push(`exit code ${data.exit_code}`);
  }
  const badge =
    event === "state"
      ? stateBadge(data.state)
      : h("span", { class: `badge state-${event === "restart" ? "restart" : "event"}` }, event.replaceAll("_", " "));
  const item = h(
    "li",
    { class: "timeline-item", dataset: { state: event === "state" ? data.state : event, ts: ts ?? "" } },
    badge,
    h("time", { class: "small muted" }, ts ? `${formatTime(ts)}${delta}` : ""),
    details.length ? h("span", { class: "small" }, details.join(" · ")) : null,
    data.exit_reason ? h("span", { class: "exit-reason" }, data.exit_reason) : null,
    data.message ? h("p", { class: "timeline-message" }, data.message) : null,
  );
  list.append(item);
}

function previousTs(list) {
  const value = list.lastElementChild?.dataset.ts;
  return value ? Number(value) : null;
}

function retiredGroup(ts, previous) {
  const delta = ts && previous ? ` (+${formatDuration((ts - previous) / 1000)})` : "";
  return h(
    "li",
    { class: "timeline-item timeline-group", dataset: { state: RETIRED, ts: ts ?? "", count: "0" } },
    h("span", { class: "badge state-event" }, "retention"),
    h("time", { class: "small muted" }, ts ? `${formatTime(ts)}${delta}` : ""),
    h("details", {}, h("summary", {}), h("ul", {})),
  );
}

function addRetired(group, data) {
  const count = Number(group.dataset.count) + 1;
  group.dataset.count = String(count);
  if (typeof data.ts === "number") group.dataset.ts = String(data.ts * 1000);
  const what = count === 1 ? "1 checkpoint deleted by retention" : `${count} checkpoints deleted by retention`;
  group.querySelector("summary").textContent = what;
  const where = [data.step !== null && data.step !== undefined ? `step ${data.step}` : null, data.epoch !== null && data.epoch !== undefined ? `epoch ${data.epoch}` : null];
  const label = where.filter(Boolean).join(", ") || data.id;
  group.querySelector("ul").append(h("li", { title: data.path || "" }, label));
}

// What the metrics panel says while it has no chart: the truth for a job that has ended.
function noMetricsText(job) {
  if (!TERMINAL.has(job.state)) return "No metrics reported yet.";
  const why = job.exit_reason ? ` (${job.exit_reason}${job.message ? `: ${firstLine(job.message)}` : ""})` : "";
  if (job.state === "failed") return `The job failed before reporting a metric${why}.`;
  if (job.state === "cancelled") return "The job was cancelled before reporting a metric.";
  return "The job ended without reporting a metric.";
}
