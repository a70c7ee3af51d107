"""The built-in training programs and their config schemas."""

from fastapi import APIRouter

from jobs.recipes import RECIPES
from service.deps import CurrentPrincipal
from service.schemas import RecipePublic, RecipesPublic

router = APIRouter(prefix="/v1/recipes", tags=["recipes"])


@router.get("", response_model=RecipesPublic)
def list_recipes(_principal: CurrentPrincipal) -> RecipesPublic:
    return RecipesPublic(
        items=[
            RecipePublic(name=r.name, description=r.description, config_schema=r.config_schema())
            for r in sorted(RECIPES.values(), key=lambda r: r.name)
        ]
    )
