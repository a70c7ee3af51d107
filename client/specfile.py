"""Job spec files for `launchbay submit`: YAML or JSON, with `--set key.path=value` overrides."""

import copy
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml


class SpecLoader(yaml.SafeLoader):
    """YAML as PyYAML reads it, except that `1e-3` is a float (YAML 1.2), not a string."""


SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


class SpecFileError(ValueError):
    """A spec file or an override that cannot be used, with a message for a person."""


def load_spec(path: Path) -> dict[str, Any]:
    """Read a job spec; `-` reads standard input. JSON files are read as JSON, others as YAML."""
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecFileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        spec = json.loads(text) if path.suffix == ".json" else yaml.load(text, SpecLoader)
    except json.JSONDecodeError as exc:
        where = f"{path}, line {exc.lineno}, column {exc.colno}"
        raise SpecFileError(f"{where}: not valid JSON: {exc.msg}") from exc
    except yaml.YAMLError as exc:
        raise SpecFileError(_yaml_problem(path, exc)) from exc
    if not isinstance(spec, dict):
        raise SpecFileError(f"{path} must hold a mapping (name: ..., recipe: ...)")
    return spec


def parse_assignment(text: str) -> tuple[list[str], Any]:
    """Split `config.lr=0.01` into `(["config", "lr"], 0.01)`.

    The value is read as YAML, so `3` is an int, `1e-3` a float, `true` a bool, `null` None and
    `[a, b]` a list; anything else stays a string, and an empty value is the empty string.
    """
    key, sep, raw = text.partition("=")
    keys = key.strip().split(".")
    if not sep or not all(keys):
        raise SpecFileError(
            f"{text!r} is not KEY=VALUE (nested keys joined by dots: config.lr=0.1)"
        )
    if not raw:
        return keys, ""
    try:
        value = yaml.load(raw, SpecLoader)
    except yaml.YAMLError:
        value = raw
    return keys, value


def apply_assignments(spec: dict[str, Any], assignments: list[str]) -> dict[str, Any]:
    """Set each `KEY=VALUE` in `spec` (in place, and returned), making missing mappings."""
    for text in assignments:
        keys, value = parse_assignment(text)
        node = spec
        for depth, key in enumerate(keys[:-1]):
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                where = ".".join(keys[: depth + 1])
                raise SpecFileError(f"cannot set {text!r}: {where} is not a mapping")
            node = child
        node[keys[-1]] = value
    return spec


# How the API shows the value of a `secret_env` variable (service.schemas.SECRET_MASK).
SECRET_MASK = "***"


def rerun_spec(
    spec: Mapping[str, Any], assignments: Sequence[str], *, started_warm: bool = False
) -> dict[str, Any]:
    """A job's spec (as the API shows it) to submit again, with `KEY=VALUE` overrides.

    A job that `started_warm` named no launcher (the API shows the default, `torchrun`, which
    given would start it cold): the rerun names none either, unless an override does.
    A `secret_env` variable's value is masked in what the API shows; each must be given again
    (`env.NAME=...`), or the job would run with the mask as its value."""
    again = copy.deepcopy(dict(spec))
    if started_warm and again.get("launcher") == "torchrun":
        del again["launcher"]
    again = apply_assignments(again, list(assignments))
    env = again.get("env") or {}
    masked = [name for name in again.get("secret_env") or [] if env.get(name) == SECRET_MASK]
    if masked:
        given = " ".join(f"--set env.{name}=..." for name in masked)
        raise SpecFileError(
            f"the job's secret variables are not shown by the API; give them again: {given}"
        )
    return again


def _yaml_problem(path: Path, exc: yaml.YAMLError) -> str:
    """`job.yaml, line 3, column 5: not valid YAML: mapping values are not allowed here`: the
    file and line where PyYAML found it (it names the text `<unicode string>` itself)."""
    name = "standard input" if str(path) == "-" else str(path)
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    why = f"{problem} ({context})" if context else problem
    if mark is None:
        return f"{name}: not valid YAML: {why}"
    return f"{name}, line {mark.line + 1}, column {mark.column + 1}: not valid YAML: {why}"
