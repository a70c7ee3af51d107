"""The spec's `outputs`: its globs (relative to the working directory, never out of it), what
they match, and the step a checkpoint's name says."""

import pytest
from pydantic import ValidationError

from jobs.outputs import OutputMatcher, compile_glob, glob_base, step_from_name
from jobs.spec import JobSpec


@pytest.mark.parametrize(
    ("glob", "path", "matches"),
    [
        ("model.pt", "model.pt", True),
        ("./model.pt", "model.pt", True),
        ("model.pt", "sub/model.pt", False),
        ("*.pt", "epoch_3.pt", True),
        ("*.pt", "checkpoints/epoch_3.pt", False),  # `*` stays within a part
        ("checkpoints/epoch_*.pt", "checkpoints/epoch_3.pt", True),
        ("checkpoints/epoch_?.pt", "checkpoints/epoch_10.pt", False),
        ("**/checkpoint-*", "checkpoint-608", True),
        ("**/checkpoint-*", "out/run1/checkpoint-608", True),
        ("out/**", "out/a/b.bin", True),
        ("out/**", "outside/a.bin", False),
        ("epoch_[0-9].pt", "epoch_7.pt", True),
        ("epoch_[!0-9].pt", "epoch_7.pt", False),
        ("[ab", "[ab", True),  # no closing bracket: a literal
        ("a.b", "axb", False),  # a dot is a dot
    ],
)
def test_what_a_glob_matches(glob: str, path: str, matches: bool) -> None:
    assert bool(compile_glob(glob).fullmatch(path)) is matches


@pytest.mark.parametrize(
    ("name", "is_dir", "step"),
    [
        ("epoch_3.pt", False, 3),
        ("checkpoint-608", True, 608),
        ("model.pt", False, None),
        ("epoch=3-step=500.ckpt", False, 500),
        ("weights.h5", False, None),  # the extension's digits are not the step
        ("v2.final.pt", False, 2),
        ("step-99999999999.pt", False, None),  # past what a step can be
    ],
)
def test_the_step_a_name_says(name: str, is_dir: bool, step: int | None) -> None:
    assert step_from_name(name, is_dir) == step


def test_where_a_search_for_matches_begins() -> None:
    assert glob_base("checkpoints/run-*/epoch_*.pt") == "checkpoints"
    assert glob_base("model.pt") == ""
    matcher = OutputMatcher(["a/b/*.pt", "a/c.pt", "d/**"])
    assert matcher.bases() == ["a", "d"]
    assert OutputMatcher(["*.pt", "a/b.pt"]).bases() == [""]


@pytest.mark.parametrize(
    "glob", ["/etc/passwd", "../x.pt", "a/../../x", "a//b", "", ".", "a\\b", "x\x00", "[z-a]"]
)
def test_a_glob_out_of_the_working_directory_or_broken_is_refused(glob: str) -> None:
    with pytest.raises(ValidationError, match="outputs"):
        JobSpec(name="j", recipe="synthetic", outputs={"checkpoints": [glob]})
    with pytest.raises(ValidationError, match="outputs"):
        JobSpec(name="j", recipe="synthetic", outputs={"artifacts": [glob]})


def test_outputs_are_optional_and_strict() -> None:
    assert JobSpec(name="j", recipe="synthetic").outputs is None
    spec = JobSpec(name="j", recipe="synthetic", outputs={"checkpoints": ["./snapshot.pt"]})
    assert spec.outputs is not None
    assert (spec.outputs.checkpoints, spec.outputs.artifacts) == (["snapshot.pt"], None)
    with pytest.raises(ValidationError, match="extra"):
        JobSpec(name="j", recipe="synthetic", outputs={"checkpoint": ["a.pt"]})
    with pytest.raises(ValidationError):
        JobSpec(name="j", recipe="synthetic", outputs={"checkpoints": ["*.pt"] * 65})
