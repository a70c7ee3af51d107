"""The built-in training programs a job spec names with `recipe:`.

This module must stay free of torch: the API service imports it to list the recipes
(GET /v1/recipes) and to validate a job's `config`. Each recipe's program is a module
run by the worker as ``torchrun --nproc_per_node N -m <Recipe.module>``; it reads its
config from LAUNCHBAY_CONFIG and validates it with the same `config_model`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from jobs.recipes.configs import DigitsConfig, SyntheticConfig, TextConfig


@dataclass(frozen=True)
class Recipe:
    """A built-in program: its name in job specs, its config model and its module."""

    name: str
    description: str
    config_model: type[BaseModel]
    module: str

    def config_schema(self) -> dict[str, Any]:
        """JSON Schema of the recipe's `config`, as GET /v1/recipes shows it."""
        return self.config_model.model_json_schema()

    def validate_config(self, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """`config` checked against the model, defaults filled in (pydantic's
        ValidationError when it does not fit: unknown field, value out of bounds)."""
        return self.config_model.model_validate(dict(config or {})).model_dump(mode="json")


RECIPES: dict[str, Recipe] = {
    recipe.name: recipe
    for recipe in (
        Recipe(
            name="synthetic",
            description="Linear regression on generated data; finishes in seconds. "
            "For tests: can fail on a chosen rank or sleep per step.",
            config_model=SyntheticConfig,
            module="jobs.recipes.synthetic",
        ),
        Recipe(
            name="digits",
            description="Small CNN on scikit-learn's 8x8 handwritten digits; reports loss "
            "and held-out accuracy (about 0.98 with the defaults).",
            config_model=DigitsConfig,
            module="jobs.recipes.digits",
        ),
        Recipe(
            name="text",
            description="Bag-of-character-n-grams text classifier on a text,label CSV; "
            "defaults to positive/negative words of the VADER sentiment lexicon.",
            config_model=TextConfig,
            module="jobs.recipes.text",
        ),
    )
}


def get_recipe(name: str) -> Recipe:
    """The recipe called `name`; KeyError naming the known ones otherwise."""
    try:
        return RECIPES[name]
    except KeyError:
        known = ", ".join(sorted(RECIPES))
        raise KeyError(f"unknown recipe {name!r}; known recipes: {known}") from None


__all__ = ["RECIPES", "Recipe", "get_recipe"]
