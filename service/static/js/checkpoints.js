// A job's checkpoints with a download link each. The download needs the bearer token, so it
// is fetched into a Blob, checked against its sha256, and saved from an object URL.

import { api, apiUrl } from "./api.js";
import { describeError, formatBytes, formatNumber, formatTime, h } from "./dom.js";

const VERIFY_LIMIT = 256 * 1024 * 1024; // larger files are saved unverified (memory)

export class CheckpointTable {
  constructor(container, job) {
    this.job = job;
    this.body = h("tbody", { id: "checkpoint-rows" });
    this.empty = h("p", { class: "muted" }, "No checkpoints yet.");
    this.table = h(
      "table",
      { class: "checkpoints-table", hidden: true },
      h(
        "thead",
        {},
        h("tr", {}, ["Step", "Epoch", "Attempt", "Size", "Metrics", "SHA-256", "Created", ""].map((c) => h("th", { scope: "col" }, c))),
      ),
      this.body,
    );
    this.status = h("p", { class: "small", role: "status", id: "download-status" });
    container.append(h("div", { class: "table-scroll" }, this.table), this.empty, this.status);
    this.key = "";
  }

  async refresh(signal) {
    const { items } = await api.listCheckpoints(this.job.id, signal);
    const key = items.map((c) => c.id).join(",");
    if (key === this.key) return;
    this.key = key;
    this.body.replaceChildren(...items.map((c) => this.row(c)));
    this.table.hidden = items.length === 0;
    this.empty.hidden = items.length > 0;
  }

  row(checkpoint) {
    const metrics = Object.entries(checkpoint.metrics)
      .map(([name, value]) => `${name} ${formatNumber(value)}`)
      .join(", ");
    const link = h(
      "a",
      {
        href: apiUrl(`/v1/jobs/${encodeURIComponent(this.job.id)}/checkpoints/${checkpoint.id}/download`).href,
        class: "download",
        dataset: { checkpointId: checkpoint.id, sha256: checkpoint.sha256 },
      },
      "Download",
    );
    link.addEventListener("click", (event) => {
      event.preventDefault();
      this.download(checkpoint, link);
    });
    // The API marks them (it alone decides which is the best); the dashboard only shows them.
    const tags = [checkpoint.latest && "latest", checkpoint.best && "best"].filter(Boolean);
    return h(
      "tr",
      { dataset: { checkpointId: checkpoint.id } },
      h("td", { dataset: { label: "Step" } }, checkpoint.step ?? "—", tags.map((t) => h("span", { class: `tag tag-${t}` }, t))),
      h("td", { dataset: { label: "Epoch" } }, checkpoint.epoch ?? "—"),
      h("td", { dataset: { label: "Attempt" } }, checkpoint.attempt),
      h("td", { dataset: { label: "Size" } }, formatBytes(checkpoint.size)),
      h("td", { dataset: { label: "Metrics" } }, metrics || "—"),
      h("td", { dataset: { label: "SHA-256" }, class: "mono sha", title: checkpoint.sha256 }, checkpoint.sha256),
      h("td", { dataset: { label: "Created" } }, formatTime(checkpoint.created_at)),
      h("td", { class: "actions" }, link),
    );
  }

  async download(checkpoint, link) {
    if (link.getAttribute("aria-busy") === "true") return;
    link.setAttribute("aria-busy", "true");
    this.status.textContent = `Downloading ${formatBytes(checkpoint.size)}…`;
    try {
      const response = await api.downloadCheckpoint(this.job.id, checkpoint.id);
      const blob = await response.blob();
      let verified = false;
      if (crypto.subtle && blob.size <= VERIFY_LIMIT) {
        const digest = await crypto.subtle.digest("SHA-256", await blob.arrayBuffer());
        const hex = Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
        if (hex !== checkpoint.sha256) throw new Error(`the download's sha256 ${hex} is not the checkpoint's`);
        verified = true;
      }
      const name = fileName(response) || `${this.job.name}-step-${checkpoint.step ?? checkpoint.id}.pt`;
      const url = URL.createObjectURL(blob);
      const save = h("a", { href: url, download: name, hidden: true });
      document.body.append(save);
      save.click();
      save.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
      this.status.textContent = `Saved ${name}${verified ? " (sha256 verified)" : ""}.`;
      this.status.dataset.state = "saved";
    } catch (err) {
      this.status.textContent = `Download failed: ${describeError(err)}`;
      this.status.dataset.state = "failed";
    } finally {
      link.removeAttribute("aria-busy");
    }
  }
}

function fileName(response) {
  const header = response.headers.get("Content-Disposition") || "";
  const star = /filename\*=(?:UTF-8|utf-8)''([^;]+)/.exec(header);
  if (star) return decodeURIComponent(star[1]);
  const plain = /filename="?([^";]+)"?/.exec(header);
  return plain ? plain[1] : null;
}
