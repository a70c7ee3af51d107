// Every rank's output, one tab per rank (labelled node/rank for a multi-node job), following
// the tail while scrolled to the bottom.

import { h } from "./dom.js";

const KEEP_LINES = 5000; // per rank, in the browser; the CLI and API have them all

export class LogViewer {
  constructor(container) {
    this.lines = new Map(); // rank -> [text]
    this.nodes = new Map(); // rank -> the node it runs on, once a line of it says
    this.rank = 0;
    this.follow = true;
    this.tabs = h("div", { class: "tabs", role: "tablist", "aria-label": "rank" });
    this.followBox = h("input", {
      type: "checkbox",
      id: "log-follow",
      checked: true,
      onchange: () => {
        this.follow = this.followBox.checked;
        if (this.follow) this.scrollToEnd();
      },
    });
    this.pane = h("pre", { class: "log", id: "log-pane", tabindex: "0", dataset: { rank: "0" } });
    this.pane.addEventListener("scroll", () => {
      const atEnd = this.pane.scrollHeight - this.pane.scrollTop - this.pane.clientHeight < 8;
      if (atEnd !== this.follow) {
        this.follow = atEnd;
        this.followBox.checked = atEnd;
      }
    });
    this.ended = false;
    this.empty = h("p", { class: "muted small log-empty", id: "log-empty" }, "No output from this rank yet.");
    this.pane.hidden = true;
    container.append(
      h("div", { class: "log-bar" }, this.tabs, h("label", { class: "small" }, this.followBox, " follow")),
      this.pane,
      this.empty,
    );
  }

  // Once the job has ended, a rank without a line wrote nothing: say so, not "yet".
  setEnded(ended) {
    this.ended = ended;
    this.showEmpty();
  }

  showEmpty() {
    const none = !(this.lines.get(this.rank) || []).length;
    this.pane.hidden = none;
    this.empty.hidden = !none;
    this.empty.textContent = this.ended ? "No output: this rank wrote nothing." : "No output from this rank yet.";
  }

  // Ranks shown as tabs before they print anything (the job's world size).
  expectRanks(count) {
    for (let rank = 0; rank < count; rank += 1) this.ensure(rank);
  }

  ensure(rank) {
    if (this.lines.has(rank)) return this.lines.get(rank);
    const lines = [];
    this.lines.set(rank, lines);
    const tabs = [...this.lines.keys()].sort((a, b) => a - b);
    this.tabs.replaceChildren(
      ...tabs.map((r) =>
        h(
          "button",
          {
            type: "button",
            role: "tab",
            class: "tab",
            "aria-selected": String(r === this.rank),
            dataset: { rank: String(r), lines: String(this.lines.get(r).length) },
            onclick: () => this.show(r),
          },
          this.label(r),
        ),
      ),
    );
    return lines;
  }

  label(rank) {
    const multiNode = [...this.nodes.values()].some((node) => node > 0);
    return multiNode && this.nodes.has(rank) ? `node ${this.nodes.get(rank)}/rank ${rank}` : `rank ${rank}`;
  }

  noteNode(line) {
    if (line.node === undefined || this.nodes.get(line.rank) === line.node) return;
    this.nodes.set(line.rank, line.node);
    for (const tab of this.tabs.children) tab.textContent = this.label(Number(tab.dataset.rank));
  }

  add(line) {
    const lines = this.ensure(line.rank);
    this.noteNode(line);
    lines.push(line.line);
    const tab = this.tabs.querySelector(`[data-rank="${line.rank}"]`);
    tab.dataset.lines = String(lines.length);
    if (lines.length > KEEP_LINES) {
      lines.splice(0, lines.length - KEEP_LINES);
      if (line.rank === this.rank) this.pane.firstChild?.remove();
    }
    if (line.rank === this.rank) {
      this.pane.append(h("div", { class: "log-line" }, line.line));
      this.showEmpty();
      if (this.follow) this.scrollToEnd();
    }
  }

  // Older lines (a page of GET /logs?order=desc), newest first: put before what is shown.
  prepend(newestFirst) {
    for (const line of newestFirst) {
      const lines = this.ensure(line.rank);
      this.noteNode(line);
      if (lines.length < KEEP_LINES) lines.unshift(line.line);
    }
    for (const tab of this.tabs.children) tab.dataset.lines = String((this.lines.get(Number(tab.dataset.rank)) || []).length);
    const fromEnd = this.pane.scrollHeight - this.pane.scrollTop;
    const lines = this.lines.get(this.rank) || [];
    this.pane.replaceChildren(...lines.map((text) => h("div", { class: "log-line" }, text)));
    this.showEmpty();
    if (this.follow) this.scrollToEnd();
    else this.pane.scrollTop = this.pane.scrollHeight - fromEnd;
  }

  // `load()` fetches the next older page; asked for by the button, or by scrolling to the top.
  setOlder(load) {
    const button = h("button", { type: "button", class: "small", id: "log-older" }, "older lines");
    const more = async () => {
      if (button.disabled) return;
      button.disabled = true;
      const left = await load().catch(() => true);
      button.disabled = false;
      button.hidden = !left;
    };
    button.onclick = more;
    this.pane.addEventListener("scroll", () => {
      if (this.pane.scrollTop === 0 && !button.hidden) more();
    });
    this.tabs.parentElement.append(button);
    return button;
  }

  show(rank) {
    this.rank = rank;
    for (const tab of this.tabs.children) {
      tab.setAttribute("aria-selected", String(tab.dataset.rank === String(rank)));
    }
    const lines = this.lines.get(rank) || [];
    this.pane.dataset.rank = String(rank);
    this.pane.replaceChildren(...lines.map((text) => h("div", { class: "log-line" }, text)));
    this.showEmpty();
    this.follow = true;
    this.followBox.checked = true;
    this.scrollToEnd();
  }

  scrollToEnd() {
    this.pane.scrollTop = this.pane.scrollHeight;
  }
}
