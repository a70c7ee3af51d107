// Form fields from a recipe's config JSON Schema (pydantic's): numbers, strings, booleans,
// enums and their nullable variants; anything else is edited as JSON.

import { h, withCode } from "./dom.js";

// {type, nullable, enum} of a property, with `anyOf: [X, {type: "null"}]` unwrapped.
export function fieldKind(schema, root) {
  const resolved = resolve(schema, root);
  const variants = resolved.anyOf ? resolved.anyOf.map((s) => resolve(s, root)) : [resolved];
  const nullable = variants.some((v) => v.type === "null");
  const main = variants.find((v) => v.type !== "null") || {};
  const type = Array.isArray(main.type) ? main.type.find((t) => t !== "null") : main.type;
  return { type: main.enum ? "enum" : type || "json", nullable, options: main.enum, main };
}

function resolve(schema, root) {
  const ref = schema && schema.$ref;
  if (!ref || !ref.startsWith("#/")) return schema || {};
  return ref.slice(2).split("/").reduce((node, key) => node?.[key], root) || {};
}

// One labelled field. get() returns {value} to send, {} to leave the field out (server
// default), or {error} when the text is not of the field's type.
export function schemaField(name, schema, root, path) {
  const kind = fieldKind(schema, root);
  const id = `field-${path.replace(/\W/g, "-")}`;
  const def = schema.default;
  const placeholder = def === undefined || def === null ? (kind.nullable ? "none" : "") : String(def);
  let input;
  if (kind.type === "boolean") {
    input = h("input", { id, type: "checkbox", checked: Boolean(def) });
  } else if (kind.type === "enum") {
    input = h(
      "select",
      { id },
      kind.nullable || def === undefined ? h("option", { value: "" }, "(default)") : null,
      kind.options.map((o) => h("option", { value: JSON.stringify(o), selected: o === def }, String(o))),
    );
  } else if (kind.type === "integer" || kind.type === "number") {
    input = h("input", {
      id,
      type: "number",
      inputmode: kind.type === "integer" ? "numeric" : "decimal",
      step: kind.type === "integer" ? "1" : "any",
      placeholder,
    });
    const min = kind.main.minimum ?? kind.main.exclusiveMinimum;
    const max = kind.main.maximum ?? kind.main.exclusiveMaximum;
    if (min !== undefined) input.min = String(min);
    if (max !== undefined) input.max = String(max);
  } else {
    input = h("input", { id, type: "text", placeholder, spellcheck: "false" });
  }
  const error = h("p", { class: "field-error", id: `${id}-error`, dataset: { errorFor: path } });
  input.setAttribute("aria-describedby", `${id}-help ${id}-error`);
  input.dataset.path = path;
  const label = schema.title || name;
  const help = [schema.description, def !== undefined ? `Default: ${JSON.stringify(def)}.` : ""].filter(Boolean).join(" ");
  const element = h(
    "div",
    { class: "field", dataset: { field: path } },
    h("label", { for: id }, label, h("code", { class: "field-key" }, name)),
    input,
    h("p", { class: "help", id: `${id}-help` }, withCode(help)),
    error,
  );

  const get = () => {
    if (kind.type === "boolean") return input.checked === Boolean(def) ? {} : { value: input.checked };
    if (kind.type === "enum") return input.value === "" ? {} : { value: JSON.parse(input.value) };
    if (kind.type === "integer" || kind.type === "number") {
      if (input.validity.badInput) return { error: `${label} must be a number` };
      if (input.value.trim() === "") return {};
      const value = Number(input.value);
      if (kind.type === "integer" && !Number.isInteger(value)) return { error: `${label} must be a whole number` };
      return { value };
    }
    const text = input.value;
    if (text.trim() === "") return {};
    if (kind.type === "string") return { value: text };
    try {
      return { value: JSON.parse(text) };
    } catch {
      return { error: `${label} must be JSON` };
    }
  };
  const set = (value) => {
    if (kind.type === "boolean") input.checked = Boolean(value);
    else if (kind.type === "enum") input.value = value === null || value === undefined ? "" : JSON.stringify(value);
    else if (value === null || value === undefined) input.value = "";
    else input.value = kind.type === "json" ? JSON.stringify(value) : String(value);
  };
  return { path, element, input, error, get, set };
}
