// Submit a job: a form built from a recipe's config schema, or a YAML/JSON spec to paste or
// edit. The API validates; its errors are shown next to the fields they name.

import { ApiError, api } from "../api.js";
import { describeError, h, randomKey, withCode } from "../dom.js";
import { schemaField } from "../schema-form.js";
import { dump, load } from "../../vendor/js-yaml/js-yaml.esm.min.js";

const DRAFT_KEY = "launchbay.draft";
const EXAMPLE = "name: synthetic-demo\nrecipe: synthetic\nnproc_per_node: 2\nconfig:\n  epochs: 3\n";
// The top-level fields of a job spec (DESIGN.md); other error paths belong to `config`.
const SPEC_FIELDS = new Set([
  "name", "recipe", "code", "args", "config", "launcher", "pass_local_rank_arg", "nnodes",
  "nproc_per_node", "device", "backend", "amp", "env", "secret_env", "queue", "max_restarts",
  "max_retries", "timeout_s", "hang_timeout_s", "checkpoint", "tags",
]);

export async function renderSubmit(ctx) {
  const { items: recipes } = await api.listRecipes(ctx.signal);
  const draft = sessionStorage.getItem(DRAFT_KEY);
  const general = h("div", { class: "submit-errors", id: "submit-error", role: "alert" });
  const form = new RecipeForm(recipes);
  const text = h("textarea", { id: "spec-text", rows: 20, spellcheck: "false", "aria-label": "job spec (YAML or JSON)", value: draft || EXAMPLE });
  const yamlErrors = h("ul", { class: "spec-errors", id: "spec-errors" });
  const submitButton = () => h("button", { type: "submit", class: "primary", dataset: { action: "submit" } }, "Submit");
  const formView = h("form", { id: "form-mode", novalidate: true }, form.element, h("div", { class: "form-actions" }, submitButton(),
    h("button", { type: "button", onclick: () => toYaml() }, "Edit as YAML/JSON")));
  const yamlView = h("form", { id: "yaml-mode", novalidate: true },
    h("p", { class: "muted small" }, withCode("A job spec in YAML or JSON, as `launchbay submit FILE` takes it (see the README).")),
    text, yamlErrors, h("div", { class: "form-actions" }, submitButton()));
  const tabs = {
    form: h("button", { type: "button", role: "tab", class: "tab", dataset: { mode: "form" }, onclick: () => setMode("form") }, "Recipe form"),
    yaml: h("button", { type: "button", role: "tab", class: "tab", dataset: { mode: "yaml" }, onclick: () => setMode("yaml") }, "YAML / JSON"),
  };
  ctx.root.append(h("section", { class: "submit-page" }, h("h1", {}, "Submit a job"),
    h("div", { class: "tabs", role: "tablist" }, tabs.form, tabs.yaml), general, formView, yamlView));

  const setMode = (mode) => {
    formView.hidden = mode !== "form";
    yamlView.hidden = mode !== "yaml";
    for (const [name, tab] of Object.entries(tabs)) tab.setAttribute("aria-selected", String(name === mode));
    general.replaceChildren();
  };
  setMode(ctx.route.query.get("mode") === "yaml" || draft ? "yaml" : "form");
  const toYaml = () => {
    const spec = form.spec();
    if (spec) {
      text.value = dump(spec);
      setMode("yaml");
    }
  };

  let last = { body: "", key: "" };
  const submit = async (spec, showErrors) => {
    general.replaceChildren();
    const body = JSON.stringify(spec);
    // The same spec again (a retry after a lost answer) reuses its key: no second job.
    if (body !== last.body) last = { body, key: randomKey() };
    for (const button of ctx.root.querySelectorAll("[data-action=submit]")) button.disabled = true;
    try {
      const job = await api.submitJob(spec, last.key);
      sessionStorage.removeItem(DRAFT_KEY);
      location.hash = `#/jobs/${encodeURIComponent(job.id)}`;
    } catch (err) {
      if (err instanceof ApiError && err.status === 422 && Array.isArray(err.detail)) {
        const unplaced = showErrors(err.detail.map((e) => ({ path: errorPath(e.loc, spec), message: e.msg })));
        general.replaceChildren(errorSummary("The API refused this spec", unplaced, err.message));
      } else if (err.status !== 401) {
        general.replaceChildren(errorSummary(`Could not submit (${describeError(err)})`, []));
      }
    } finally {
      for (const button of ctx.root.querySelectorAll("[data-action=submit]")) button.disabled = false;
    }
  };
  formView.addEventListener("submit", (event) => {
    event.preventDefault();
    const spec = form.spec();
    if (spec) submit(spec, (errors) => form.showErrors(errors));
  });
  yamlView.addEventListener("submit", (event) => {
    event.preventDefault();
    yamlErrors.replaceChildren();
    let spec;
    try {
      spec = load(text.value);
    } catch (err) {
      const where = err.mark ? ` (line ${err.mark.line + 1}, column ${err.mark.column + 1})` : "";
      yamlErrors.append(h("li", {}, `Not valid YAML or JSON${where}: ${err.reason || err.message}`));
      return;
    }
    if (!spec || typeof spec !== "object" || Array.isArray(spec)) {
      yamlErrors.append(h("li", {}, "The spec must be a mapping of fields (name, recipe, config, …)."));
      return;
    }
    sessionStorage.setItem(DRAFT_KEY, text.value);
    submit(spec, (errors) => {
      for (const { path, message } of errors) {
        const line = findLine(text.value, path ? path.split(".") : []);
        const where = [path || "spec", line ? `line ${line}` : ""].filter(Boolean).join(", ");
        yamlErrors.append(h("li", { dataset: { path } }, h("code", {}, where), `: ${message}`));
      }
      return [];
    });
  });
}

// The general fields and the chosen recipe's config fields.
class RecipeForm {
  constructor(recipes) {
    this.recipes = recipes;
    this.nameTouched = false;
    const first = recipes[0]?.name || "";
    this.general = [
      plainField("name", "Name", h("input", { type: "text", maxlength: 128, oninput: () => { this.nameTouched = true; } }), "1 to 128 characters."),
      plainField("recipe", "Recipe", h("select", { onchange: () => this.pickRecipe() }, recipes.map((r) => h("option", { value: r.name }, r.name))), ""),
      plainField("nproc_per_node", "Processes per node", h("input", { type: "number", min: 1, max: 64, step: 1, value: "2" }), "One rank each (a GPU each on CUDA)."),
      plainField("device", "Device", h("select", {}, ["auto", "cpu", "cuda"].map((d) => h("option", { value: d }, d))), ""),
      plainField("queue", "Queue", h("input", { type: "text", placeholder: "default" }), "Workers listening on this queue run the job."),
    ];
    const count = (min) => h("input", { type: "number", min, step: 1 });
    this.checkpoint = [
      plainField("checkpoint.every_epochs", "Every epochs", count(1), "Save after every N epochs (default 1)."),
      plainField("checkpoint.every_steps", "Every steps", count(1), "Also save every N steps (default: off)."),
      plainField("checkpoint.keep_last", "Keep last", count(1), "How many recent checkpoints to keep (default 3); the best is kept too."),
      plainField("checkpoint.best_metric", "Best metric", h("input", { type: "text", placeholder: "e.g. loss", spellcheck: "false" }), "The reported metric that picks the best checkpoint."),
      plainField("checkpoint.best_mode", "Best is", h("select", {}, h("option", { value: "" }, "(default: min)"), ["min", "max"].map((m) => h("option", { value: m }, m))), "Lowest or highest value of the best metric."),
    ];
    this.description = h("p", { class: "muted recipe-description" });
    this.configBox = h("div", { class: "config-fields", id: "config-fields" });
    this.element = h("div", {},
      h("fieldset", {}, h("legend", {}, "Job"), h("div", { class: "general-fields" }, this.general.map((f) => f.element)), this.description),
      h("fieldset", {}, h("legend", {}, "Config"), this.configBox),
      h("fieldset", { id: "checkpoint-fields" }, h("legend", {}, "Checkpoints"), h("div", { class: "general-fields" }, this.checkpoint.map((f) => f.element))));
    this.byPath = new Map([...this.general, ...this.checkpoint].map((f) => [f.path, f]));
    this.field("recipe").input.value = first;
    this.pickRecipe();
  }

  field(path) {
    return this.byPath.get(path);
  }

  pickRecipe() {
    const recipe = this.recipes.find((r) => r.name === this.field("recipe").input.value);
    for (const path of [...this.byPath.keys()]) if (path.startsWith("config.")) this.byPath.delete(path);
    this.configBox.replaceChildren();
    this.description.replaceChildren(...withCode(recipe?.description || ""));
    this.schema = recipe?.config_schema || { properties: {} };
    for (const [name, prop] of Object.entries(this.schema.properties || {})) {
      const field = schemaField(name, prop, this.schema, `config.${name}`);
      this.byPath.set(field.path, field);
      this.configBox.append(field.element);
    }
    if (!this.nameTouched && recipe) this.field("name").input.value = `${recipe.name}-${randomKey().slice(0, 6)}`;
  }

  // The spec, or null (and the reasons shown) when a field cannot be read.
  spec() {
    this.clearErrors();
    const spec = { config: {} };
    const problems = [];
    for (const field of this.byPath.values()) {
      const { value, error } = field.get();
      if (error) problems.push({ path: field.path, message: error });
      else if (value !== undefined) {
        const [head, key] = field.path.split(".");
        if (key) spec[head] = { ...spec[head], [key]: value };
        else spec[head] = value;
      }
    }
    if (problems.length) {
      this.showErrors(problems);
      return null;
    }
    return spec;
  }

  clearErrors() {
    for (const field of this.byPath.values()) {
      field.error.textContent = "";
      field.input.removeAttribute("aria-invalid");
    }
  }

  // Puts each error beside its field; returns those that match no field.
  showErrors(errors) {
    const unplaced = [];
    let first = null;
    for (const error of errors) {
      const field = this.field(error.path) || this.field(`config.${error.path}`);
      if (!field) {
        unplaced.push(error);
        continue;
      }
      field.error.textContent = [field.error.textContent, error.message].filter(Boolean).join("; ");
      field.input.setAttribute("aria-invalid", "true");
      first = first || field;
    }
    first?.input.focus();
    return unplaced;
  }
}

function plainField(path, label, input, help) {
  const id = `field-${path.replace(/\W/g, "-")}`;
  input.id = id;
  input.dataset.path = path;
  input.setAttribute("aria-describedby", `${id}-help ${id}-error`);
  const error = h("p", { class: "field-error", id: `${id}-error`, dataset: { errorFor: path } });
  const element = h("div", { class: "field", dataset: { field: path } }, h("label", { for: id }, label), input,
    h("p", { class: "help", id: `${id}-help` }, help), error);
  const get = () => {
    const raw = input.value.trim();
    if (raw === "") return {};
    if (input.type !== "number") return { value: raw };
    const value = Number(raw);
    return Number.isInteger(value) ? { value } : { error: `${label} must be a whole number` };
  };
  return { path, element, input, error, get, set: (v) => { input.value = v ?? ""; } };
}

// "config.lr" from FastAPI's loc ["body", "config", "lr"]. A recipe's config errors may come
// without the "config" prefix (["body", "lr"]): a path no spec field starts is a config key.
function errorPath(loc, spec) {
  const parts = (loc || []).map(String);
  if (parts[0] === "body") parts.shift();
  if (parts.length && !SPEC_FIELDS.has(parts[0]) && spec && spec.recipe && !(parts[0] in spec)) parts.unshift("config");
  return parts.join(".");
}

function errorSummary(title, errors, message) {
  return h("div", { class: "error-panel" }, h("strong", {}, title),
    message ? h("p", { class: "error-message" }, message) : null,
    errors.length ? h("ul", {}, errors.map((e) => h("li", {}, e.path ? h("code", {}, e.path) : null, e.path ? ": " : "", e.message))) : null);
}

// The 1-based line of a key path in block YAML or pretty JSON, when it can be found.
export function findLine(text, parts) {
  const lines = text.split(/\r?\n/);
  let from = 0;
  let indent = -1;
  let found = null;
  for (const part of parts) {
    const key = new RegExp(`^(\\s*)(?:-\\s+)?(["']?)${part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\2\\s*:`);
    found = null;
    for (let i = from; i < lines.length; i += 1) {
      const m = key.exec(lines[i]);
      const lineIndent = lines[i].search(/\S/);
      if (!m && lineIndent >= 0 && lineIndent <= indent) break;
      if (m && m[1].length > indent) {
        found = i;
        indent = m[1].length;
        from = i + 1;
        break;
      }
    }
    if (found === null) return null;
  }
  return found === null ? null : found + 1;
}
