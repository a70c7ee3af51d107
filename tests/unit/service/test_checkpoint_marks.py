"""The listing's `best` and `latest` marks, and what `best`/`latest` downloads resolve to, come
from one function (`CheckpointPolicy.named_best`), so they cannot disagree."""

import pytest

from jobs.contract.checkpoints import CheckpointPolicy
from service.errors import NotFound
from service.models import Checkpoint, Job
from service.routes.checkpoints import resolve_checkpoint
from service.schemas import CheckpointsPublic


def row(seq: int, **metrics: object) -> Checkpoint:
    return Checkpoint(
        id=f"c{seq}", job_id="j1", seq=seq, attempt=1, metrics=metrics, size=1, sha256="a", path="p"
    )


def job_with(**policy: object) -> Job:
    return Job(id="j1", name="j", spec={"name": "j", "recipe": "synthetic", "checkpoint": policy})


def marks(policy: dict[str, object], rows: list[Checkpoint]) -> list[tuple[str, bool, bool]]:
    listing = CheckpointsPublic.marked(CheckpointPolicy.model_validate(policy), rows)
    return [(c.id, c.best, c.latest) for c in listing.items]


CASES = [
    ({"best_metric": "loss"}, [row(1, loss=0.2), row(2, loss=0.2), row(3, loss=0.5)], "c2"),
    ({"best_metric": "acc", "best_mode": "max"}, [row(1, acc="1.0"), row(2, acc=0.3)], "c2"),
    ({"best_metric": None}, [row(1, loss=0.1), row(2, loss=0.9)], "c2"),
    ({"best_metric": "val_loss"}, [row(1, loss=0.1), row(2, loss=0.9)], None),
]


@pytest.mark.parametrize(("policy", "rows", "best"), CASES)
def test_the_listing_marks_what_the_downloads_resolve(
    policy: dict[str, object], rows: list[Checkpoint], best: str | None
) -> None:
    listed = marks(policy, rows)
    assert [c for c, is_best, _ in listed if is_best] == ([best] if best else [])
    assert [c for c, _, is_latest in listed if is_latest] == [rows[-1].id]
    job = job_with(**policy)
    assert resolve_checkpoint(job, "latest", rows).id == rows[-1].id
    if best is None:
        with pytest.raises(NotFound):
            resolve_checkpoint(job, "best", rows)
    else:
        assert resolve_checkpoint(job, "best", rows).id == best


def test_no_checkpoints_no_marks() -> None:
    assert marks({"best_metric": "loss"}, []) == []
