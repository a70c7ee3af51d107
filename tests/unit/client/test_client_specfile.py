"""Spec files and `--set` overrides."""

from pathlib import Path
from typing import Any

import pytest

from client.specfile import (
    SpecFileError,
    apply_assignments,
    load_spec,
    parse_assignment,
    rerun_spec,
)


@pytest.mark.parametrize(
    ("text", "keys", "value"),
    [
        ("config.lr=0.01", ["config", "lr"], 0.01),
        ("config.epochs=3", ["config", "epochs"], 3),
        ("config.lr=1e-3", ["config", "lr"], 0.001),
        ("amp=true", ["amp"], True),
        ("timeout_s=null", ["timeout_s"], None),
        ("name=my job", ["name"], "my job"),
        ("name=", ["name"], ""),
        ("args=[--seed, 1]", ["args"], ["--seed", 1]),
        ("env.URL=http://x:1/?a=b", ["env", "URL"], "http://x:1/?a=b"),
        ("tags.v='007'", ["tags", "v"], "007"),
    ],
)
def test_parse_assignment(text: str, keys: list[str], value: Any) -> None:
    assert parse_assignment(text) == (keys, value)


@pytest.mark.parametrize("text", ["config.lr", "=1", "config..lr=1", "config.=1"])
def test_malformed_assignments_are_refused(text: str) -> None:
    with pytest.raises(SpecFileError):
        parse_assignment(text)


def test_apply_sets_nested_keys_and_makes_missing_mappings() -> None:
    spec: dict[str, Any] = {"name": "a", "config": {"lr": 0.1, "epochs": 1}}
    apply_assignments(spec, ["config.lr=0.01", "checkpoint.every_steps=50", "nproc_per_node=4"])
    assert spec == {
        "name": "a",
        "config": {"lr": 0.01, "epochs": 1},
        "checkpoint": {"every_steps": 50},
        "nproc_per_node": 4,
    }


def test_apply_refuses_to_descend_into_a_scalar() -> None:
    with pytest.raises(SpecFileError, match="name is not a mapping"):
        apply_assignments({"name": "a"}, ["name.x=1"])


def test_load_yaml_and_json(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: a\nrecipe: synthetic\nconfig: {lr: 1e-3}\n")
    (tmp_path / "b.json").write_text('{"name": "b", "recipe": "digits"}')
    assert load_spec(tmp_path / "a.yaml")["config"] == {"lr": 1e-3}
    assert load_spec(tmp_path / "b.json") == {"name": "b", "recipe": "digits"}


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("bad.json", "{name: 1}", "not valid JSON"),
        ("bad.yaml", "name: [1", "not valid YAML"),
        ("list.yaml", "- a\n- b\n", "must hold a mapping"),
    ],
)
def test_load_refuses_what_is_not_a_spec(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(SpecFileError, match=message):
        load_spec(tmp_path / name)


def test_load_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecFileError, match="cannot read"):
        load_spec(tmp_path / "nope.yaml")


def test_a_rerun_of_a_warm_job_names_no_launcher_unless_told() -> None:
    shown = {"name": "x", "recipe": "synthetic", "launcher": "torchrun"}
    assert "launcher" not in rerun_spec(shown, [], started_warm=True)
    assert rerun_spec(shown, [], started_warm=False)["launcher"] == "torchrun"
    assert rerun_spec(shown, ["launcher=torchrun"], started_warm=True)["launcher"] == "torchrun"
