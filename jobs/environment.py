"""A job's `environment`: the Python packages it asks for, checked where the spec is
(worker/environment.py builds them)."""

from typing import Annotated

from packaging.requirements import InvalidRequirement, Requirement
from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_REQUIREMENTS = 256


def check_requirement(line: str) -> str:
    """One requirement, as pip's requirement files write it, or ValueError: a name with extras,
    versions and markers (PEP 508), or a direct reference to an https URL. No options (`-e`,
    `--index-url`, `-r`...), no local paths or other URLs: the worker's package sources are its
    own settings."""
    text = line.strip()
    if not text:
        raise ValueError("empty requirement")
    if text.startswith("-"):
        raise ValueError(
            f"{text!r}: options are not allowed in a job's requirements (the package index "
            "and wheelhouse are the worker's: LAUNCHBAY_PIP_INDEX_URL, LAUNCHBAY_PIP_FIND_LINKS)"
        )
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        raise ValueError(f"{text!r} is not a requirement (name[extras] specifier): {exc}") from None
    if requirement.url is not None and not requirement.url.startswith("https://"):
        raise ValueError(f"{text!r}: a direct reference must be an https:// URL")
    return str(requirement)


class EnvironmentSpec(BaseModel):
    """`requirements` (pip requirement strings) and/or `requirements_file` (a path inside the
    uploaded code). Without `environment`, a `requirements.txt` at the root of the uploaded
    code is used."""

    model_config = ConfigDict(extra="forbid")

    requirements: Annotated[
        list[Annotated[str, Field(max_length=1024)]], Field(max_length=MAX_REQUIREMENTS)
    ] = []
    requirements_file: Annotated[str, Field(min_length=1, max_length=512)] | None = None

    @field_validator("requirements")
    @classmethod
    def _requirements(cls, requirements: list[str]) -> list[str]:
        return [check_requirement(r) for r in requirements]

    @field_validator("requirements_file")
    @classmethod
    def _relative_inside(cls, value: str | None) -> str | None:
        if value is None:
            return value
        parts = value.replace("\\", "/").split("/")
        if value.startswith("/") or ".." in parts:
            raise ValueError("requirements_file must be a relative path inside the uploaded code")
        return value
