// A job's webhook deliveries (the caller's endpoints) and its ranks' recorded stacks, with a
// button that asks a running job's worker for every rank's stack now.

import { request } from "./api.js";
import { describeError, formatTime, h } from "./dom.js";

const job = (id) => `/v1/jobs/${encodeURIComponent(id)}`;

export class DeliveriesPanel {
  constructor(container, jobId) {
    this.jobId = jobId;
    this.box = h("div", { id: "deliveries" });
    container.append(this.box);
  }

  async refresh(signal) {
    const hooks = (await request("GET", "/v1/webhooks", { signal })).items;
    const rows = [];
    for (const hook of hooks) {
      const path = `/v1/webhooks/${encodeURIComponent(hook.id)}/deliveries`;
      const { items } = await request("GET", path, { params: { job_id: this.jobId }, signal });
      rows.push(...items.map((d) => ({ ...d, url: hook.url })));
    }
    if (!rows.length) {
      this.box.replaceChildren(h("p", { class: "muted" }, hooks.length ? "No deliveries for this job." : "No webhooks registered (launchbay webhook add)."));
      return;
    }
    const columns = ["Event", "Endpoint", "Status", "Attempts", "Last answer", "Last attempt"];
    this.box.replaceChildren(
      h(
        "table",
        { class: "deliveries" },
        h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c)))),
        h(
          "tbody",
          {},
          rows.map((d) =>
            h(
              "tr",
              { dataset: { deliveryId: d.id, status: d.status } },
              h("td", {}, d.type),
              h("td", { class: "mono" }, d.url),
              h("td", {}, d.status),
              h("td", {}, String(d.attempts)),
              h("td", { title: d.last_error || "" }, d.last_status_code ? String(d.last_status_code) : d.last_error || ""),
              h("td", {}, formatTime(d.last_attempt_at)),
            ),
          ),
        ),
      ),
    );
  }
}

export class StacksPanel {
  constructor(container, jobId) {
    this.jobId = jobId;
    this.status = h("span", { class: "small", role: "status", id: "stacks-status" });
    this.button = h("button", { type: "button", class: "small", id: "record-stacks", onclick: () => this.record() }, "Record stacks now");
    this.box = h("div", { id: "stacks" });
    container.append(h("div", { class: "spec-bar" }, this.button, this.status), this.box);
  }

  setRunning(running) {
    this.button.hidden = !running;
  }

  async record() {
    this.status.textContent = "asking the worker…";
    try {
      await request("POST", `${job(this.jobId)}/stacks`);
      this.status.textContent = "asked; the stacks appear here in a few seconds";
      setTimeout(() => this.refresh().catch(() => {}), 2000);
    } catch (err) {
      this.status.textContent = describeError(err);
    }
  }

  async refresh(signal) {
    const { items, summary } = await request("GET", `${job(this.jobId)}/stacks`, { signal });
    if (!items.length) {
      this.box.replaceChildren(h("p", { class: "muted" }, "No stacks recorded (they are, when the hang watchdog stops the job)."));
      return;
    }
    const latest = items.filter((s) => s.ts === items[0].ts);
    this.box.replaceChildren(
      summary ? h("p", { class: "stack-summary" }, `${summary.reason} at ${formatTime(summary.ts * 1000)}: ${summary.note}`) : null,
      ...latest.map((s) =>
        h(
          "details",
          { class: "rank-stack", dataset: { rank: String(s.rank), inCollective: String(s.in_collective) }, open: true },
          h("summary", {}, `rank ${s.rank} (node ${s.node}): ${s.in_collective ? "in a collective" : "not in a collective"}`),
          h("pre", { class: "spec" }, s.stack),
        ),
      ),
    );
  }
}


