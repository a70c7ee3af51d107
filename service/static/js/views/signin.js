// Sign-in: a pasted token is checked against the API, then kept in this tab's session storage.

import { ApiError, request, setToken } from "../api.js";
import { h } from "../dom.js";

export async function renderSignIn(ctx) {
  const reason = sessionStorage.getItem("launchbay.signin-reason");
  sessionStorage.removeItem("launchbay.signin-reason");
  const next = ctx.route.query.get("next") || "#/jobs";
  const input = h("input", {
    id: "token",
    name: "token",
    type: "password",
    autocomplete: "off",
    spellcheck: "false",
    required: true,
    placeholder: "lb_…",
    "aria-describedby": "signin-error",
  });
  const error = h("p", { id: "signin-error", class: "form-error", role: "alert" }, reason || "");
  const button = h("button", { type: "submit", class: "primary" }, "Sign in");
  const form = h(
    "form",
    { class: "card signin", id: "signin-form" },
    h("h1", {}, "Sign in to Launchbay"),
    h(
      "p",
      { class: "muted" },
      "Paste an API token: one made with POST /v1/tokens, or the server's LAUNCHBAY_ADMIN_TOKEN. ",
      "It stays in this browser tab's session storage and is sent as the bearer token.",
    ),
    h("label", { for: "token" }, "Token"),
    input,
    button,
    error,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = input.value.trim();
    if (!token) {
      error.textContent = "Paste a token first.";
      return;
    }
    button.disabled = true;
    error.textContent = "";
    try {
      await request("GET", "/v1/jobs", { params: { limit: 1 }, token });
      setToken(token);
      location.hash = next.startsWith("#/") && !next.startsWith("#/signin") ? next : "#/jobs";
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) {
        error.textContent = `That token was not accepted (${err.message}). Check it and paste it again.`;
      } else {
        error.textContent = `Could not sign in: ${err instanceof ApiError ? err.describe() : err.message}`;
      }
      input.select();
    } finally {
      button.disabled = false;
    }
  });
  ctx.root.append(form);
  input.focus();
}
