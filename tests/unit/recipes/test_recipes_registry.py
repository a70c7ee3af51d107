"""The recipe registry the API uses: names, schemas, config validation, and no torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from jobs.recipes import RECIPES, Recipe, get_recipe


def test_the_three_recipes_of_the_design() -> None:
    assert sorted(RECIPES) == ["digits", "synthetic", "text"]
    for name, recipe in RECIPES.items():
        assert recipe.name == name and recipe.description
        assert recipe.module == f"jobs.recipes.{name}"
    assert get_recipe("digits") is RECIPES["digits"]


def test_an_unknown_recipe_is_a_key_error_naming_the_known_ones() -> None:
    with pytest.raises(KeyError, match="digits, synthetic, text"):
        get_recipe("mnist")


@pytest.mark.parametrize("recipe", RECIPES.values(), ids=list(RECIPES))
def test_every_recipe_runs_on_an_empty_config_and_has_a_json_schema(recipe: Recipe) -> None:
    filled = recipe.validate_config({})
    assert filled["epochs"] >= 1 and filled["batch_size"] >= 1 and filled["lr"] > 0
    assert recipe.validate_config(None) == filled
    schema = recipe.config_schema()
    json.dumps(schema)
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert set(schema["properties"]) == set(filled)
    assert not schema.get("required"), "every field has a default"


@pytest.mark.parametrize("recipe", RECIPES.values(), ids=list(RECIPES))
def test_unknown_fields_are_refused(recipe: Recipe) -> None:
    with pytest.raises(ValidationError, match="epochz"):
        recipe.validate_config({"epochz": 3})


@pytest.mark.parametrize(
    "config",
    [{"epochs": 0}, {"epochs": 1001}, {"batch_size": 0}, {"batch_size": 5000}, {"lr": 0},
     {"lr": -1.0}, {"log_every_steps": 0}, {"val_fraction": 1.0}, {"epochs": "many"}],
)  # fmt: skip
def test_values_out_of_bounds_are_refused(config: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        get_recipe("digits").validate_config(config)


def test_recipe_specific_fields() -> None:
    synthetic = get_recipe("synthetic").validate_config({"fail_on_rank": 1, "steps": 40})
    assert synthetic["fail_on_rank"] == 1 and synthetic["steps"] == 40
    assert synthetic["sleep_per_step_s"] == 0
    with pytest.raises(ValidationError):
        get_recipe("synthetic").validate_config({"fail_on_rank": -1})
    text = get_recipe("text").validate_config({"csv_path": "data/reviews.csv"})
    assert text["csv_path"] == "data/reviews.csv" and text["text_column"] == "text"
    with pytest.raises(ValidationError, match="ngram_min"):
        get_recipe("text").validate_config({"ngram_min": 5, "ngram_max": 3})


def test_listing_recipes_does_not_import_torch() -> None:
    code = (
        "import sys, jobs.recipes as r; "
        "[x.config_schema() for x in r.RECIPES.values()]; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "False"
