// Server-Sent Events over fetch(): EventSource cannot send an Authorization header.
// The stream resumes after the last event seen (Last-Event-ID) when it drops.

import { ApiError, request } from "./api.js";

const LINE_END = /\r\n|\r|\n/g;

// An incremental parser of the text/event-stream format (WHATWG HTML, "server-sent events").
export class EventStreamParser {
  constructor(dispatch) {
    this.dispatch = dispatch;
    this.buffer = "";
    this.data = [];
    this.type = "";
    this.id = null;
  }

  feed(text) {
    this.buffer += text;
    let start = 0;
    LINE_END.lastIndex = 0;
    for (let match = LINE_END.exec(this.buffer); match; match = LINE_END.exec(this.buffer)) {
      // A lone "\r" at the end may be the first half of "\r\n": wait for the next chunk.
      if (match[0] === "\r" && match.index === this.buffer.length - 1) break;
      this.line(this.buffer.slice(start, match.index));
      start = match.index + match[0].length;
    }
    this.buffer = this.buffer.slice(start);
  }

  // At the end of the stream: a last "\r" can no longer be half of "\r\n".
  finish() {
    if (this.buffer.endsWith("\r")) this.feed("\n");
  }

  line(line) {
    if (line === "") {
      if (this.data.length) {
        this.dispatch({ id: this.id, event: this.type || "message", data: this.data.join("\n") });
      }
      this.data = [];
      this.type = "";
      return;
    }
    if (line.startsWith(":")) return; // a comment (the server's keep-alive ping)
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "event") this.type = value;
    else if (field === "id" && !value.includes("\0")) this.id = value;
  }
}

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });

// Follows `path` until close(), or until the stream ends and isFinished() says nothing more
// will come. onEvent gets {id, event, data} with data parsed from JSON; onStatus gets
// "connecting" | "live" | "reconnecting" | "ended"; onError gets (ApiError, fatal).
export class EventStream {
  constructor(path, { onEvent, onStatus = () => {}, onError = () => {}, isFinished }) {
    this.path = path;
    this.onEvent = onEvent;
    this.onStatus = onStatus;
    this.onError = onError;
    this.isFinished = isFinished;
    this.lastEventId = null;
    this.controller = new AbortController();
  }

  start() {
    this.run();
    return this;
  }

  close() {
    this.controller.abort();
  }

  get closed() {
    return this.controller.signal.aborted;
  }

  async run() {
    let delay = 500;
    this.onStatus("connecting");
    while (!this.closed) {
      let ended = false;
      try {
        const headers = { Accept: "text/event-stream" };
        if (this.lastEventId !== null) headers["Last-Event-ID"] = this.lastEventId;
        const response = await request("GET", this.path, {
          headers,
          raw: true,
          signal: this.controller.signal,
        });
        this.onStatus("live");
        delay = 500;
        await this.read(response.body);
        ended = true;
      } catch (err) {
        if (this.closed) return;
        const fatal = err instanceof ApiError && err.status >= 400 && err.status < 500;
        this.onError(err instanceof ApiError ? err : new ApiError(0, "stream_error", err.message), fatal);
        if (fatal && err.status !== 429) return;
      }
      if (this.closed) return;
      if (ended) {
        try {
          if (await this.isFinished()) {
            this.onStatus("ended");
            return;
          }
        } catch {
          // Unknown: try the stream again, it answers the same question.
        }
      }
      this.onStatus("reconnecting");
      await sleep(delay, this.controller.signal);
      delay = Math.min(delay * 2, 5000);
    }
  }

  async read(body) {
    const parser = new EventStreamParser((raw) => {
      let data;
      try {
        data = JSON.parse(raw.data);
      } catch {
        data = raw.data;
      }
      if (raw.id !== null) this.lastEventId = raw.id;
      this.onEvent({ id: raw.id, event: raw.event, data });
    });
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) {
          parser.finish();
          return;
        }
        parser.feed(value);
      }
    } finally {
      reader.releaseLock();
    }
  }
}
