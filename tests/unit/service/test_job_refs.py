"""How a job ref reads (`service.job_refs.parse_job_ref`), and the known fields an unknown
one is matched against (`service.errors.known_fields`): no database."""

import pytest
from pydantic import BaseModel

from jobs.spec import JobSpec
from service.errors import BadRequest, NotFound, known_fields
from service.job_refs import JobRef, parse_job_ref

WHOLE = "4ca2" + "0" * 28


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        (WHOLE, JobRef(WHOLE, job_id=WHOLE)),
        (WHOLE.upper(), JobRef(WHOLE.upper(), job_id=WHOLE)),
        ("4ca2", JobRef("4ca2", prefix="4ca2", name="4ca2")),
        ("4CA2", JobRef("4CA2", prefix="4ca2", name="4CA2")),
        ("4ca", JobRef("4ca", name="4ca")),  # too short to be a prefix
        ("digits-ddp", JobRef("digits-ddp", name="digits-ddp")),
        ("ab%_", JobRef("ab%_", name="ab%_")),  # wildcards are no prefix
        ("digits-ddp@1", JobRef("digits-ddp@1", name="digits-ddp", nth=1)),
        ("a@b@12", JobRef("a@b@12", name="a@b", nth=12)),
        ("@2", JobRef("@2", nth=2)),
        ("x@", JobRef("x@", name="x@")),
    ],
)
def test_what_a_ref_names(text: str, ref: JobRef) -> None:
    assert parse_job_ref(text) == ref


@pytest.mark.parametrize("text", ["x@0", "x@-1", "@0", "x@99999999999999999999", "x@10001"])
def test_a_bad_count_is_a_bad_request(text: str) -> None:
    with pytest.raises(BadRequest):
        parse_job_ref(text)


@pytest.mark.parametrize("text", ["", "x" * 10_000, "a\x00b"])
def test_what_can_name_no_job_is_not_found_and_never_echoed_whole(text: str) -> None:
    with pytest.raises(NotFound) as raised:
        parse_job_ref(text)
    assert len(raised.value.message) < 200


class Item(BaseModel):
    alpha: int


class Holder(BaseModel):
    items: list[Item] | None = None


def test_known_fields_follow_nested_models() -> None:
    assert known_fields(Holder, ["items", 0]) == ["alpha"]
    assert "nproc_per_node" in known_fields(JobSpec, [])
    assert "every_steps" in known_fields(JobSpec, ["checkpoint"])
    assert known_fields(JobSpec, ["config"]) == []
    assert known_fields(JobSpec, ["nope", "deeper"]) == []
    assert known_fields(None, []) == []
