// The HTTP API of Launchbay: bearer token, JSON, and its error body
// {"error": {"code", "message", "detail"}} turned into ApiError.

const TOKEN_KEY = "launchbay.token";

export class ApiError extends Error {
  constructor(status, code, message, detail = null) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.detail = detail;
  }

  // One line for a person: "404 not_found: no job 'x'".
  describe() {
    return this.status ? `${this.status} ${this.code}: ${this.message}` : this.message;
  }
}

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
  sessionStorage.removeItem("launchbay.is-admin");
}

export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem("launchbay.is-admin");
}

const unauthorizedListeners = new Set();

// Called when the stored token stops being accepted (revoked, expired, server restarted).
export function onUnauthorized(listener) {
  unauthorizedListeners.add(listener);
}

export function apiUrl(path, params = {}) {
  // Relative to the page, so the dashboard also works behind a path prefix.
  const url = new URL(path.replace(/^\//, ""), document.baseURI);
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, value);
  }
  return url;
}

// fetch() with the token; JSON in and out. `raw: true` returns the Response (streams, files).
// `token` overrides the stored one (sign-in checks a token before keeping it).
export async function request(method, path, options = {}) {
  const { params, body, headers, token, signal, raw } = options;
  const sent = new Headers(headers);
  const bearer = token ?? getToken();
  if (bearer) sent.set("Authorization", `Bearer ${bearer}`);
  if (body !== undefined) sent.set("Content-Type", "application/json");
  let response;
  try {
    response = await fetch(apiUrl(path, params), {
      method,
      headers: sent,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      cache: "no-store",
    });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "network_error", `Cannot reach the Launchbay API (${err.message}).`);
  }
  if (!response.ok) {
    const error = await errorFrom(response);
    if (error.status === 401 && token === undefined) {
      for (const listener of unauthorizedListeners) listener(error);
    }
    throw error;
  }
  if (raw) return response;
  if (response.status === 204) return null;
  return response.json();
}

export async function errorFrom(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // Not JSON (a proxy's error page): described by its status below.
  }
  const error = body && body.error;
  if (error && typeof error.message === "string") {
    return new ApiError(response.status, error.code || "error", error.message, error.detail);
  }
  const text = `The API answered ${response.status} ${response.statusText}`.trim();
  return new ApiError(response.status, "http_error", `${text}.`);
}

const job = (id) => `/v1/jobs/${encodeURIComponent(id)}`;

export const api = {
  listJobs: (params, signal) => request("GET", "/v1/jobs", { params, signal }),
  listRuns: (params, signal) => request("GET", "/v1/runs", { params, signal }),
  getJob: (id, signal) => request("GET", job(id), { signal }),
  cancelJob: (id) => request("POST", `${job(id)}/cancel`),
  submitJob: (spec, idempotencyKey) =>
    request("POST", "/v1/jobs", { body: spec, headers: { "Idempotency-Key": idempotencyKey } }),
  listCheckpoints: (id, signal) => request("GET", `${job(id)}/checkpoints`, { signal }),
  listNodes: (id, signal) => request("GET", `${job(id)}/nodes`, { signal }),
  downloadCheckpoint: (id, ref) =>
    request("GET", `${job(id)}/checkpoints/${encodeURIComponent(ref)}/download`, { raw: true }),
  listRecipes: (signal) => request("GET", "/v1/recipes", { signal }),
  listMetrics: (id, params, signal) => request("GET", `${job(id)}/metrics`, { params, signal }),
  listLogs: (id, params, signal) => request("GET", `${job(id)}/logs`, { params, signal }),
  getTimeline: (id, signal) => request("GET", `${job(id)}/timeline`, { signal }),
  getGoodput: (id, signal) => request("GET", `${job(id)}/goodput`, { signal }),
  getGoodputSummary: (params, signal) => request("GET", "/v1/goodput", { params, signal }),
  // Whether the token is an admin's (only an admin lists tokens); asked once per tab.
  isAdmin: async (signal) => {
    const known = sessionStorage.getItem("launchbay.is-admin");
    if (known !== null) return known === "true";
    const response = await request("GET", "/v1/tokens", { signal, raw: true }).catch((err) => {
      if (err.status === 403) return null;
      throw err;
    });
    sessionStorage.setItem("launchbay.is-admin", String(response !== null));
    return response !== null;
  },
  eventsPath: (id) => `${job(id)}/events`,
};
