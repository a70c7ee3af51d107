"""The one "best checkpoint" rule (`CheckpointPolicy.best`), used by retention and downloads."""

from dataclasses import dataclass, field

from jobs.contract.checkpoints import CheckpointPolicy


@dataclass
class Row:
    seq: int
    metrics: dict[str, object] = field(default_factory=dict)


def best(rows: list[Row], **policy: object) -> Row | None:
    return CheckpointPolicy.model_validate(policy).best(
        rows, metrics=lambda r: r.metrics, seq=lambda r: r.seq
    )


def test_lowest_or_highest_by_the_mode() -> None:
    rows = [Row(1, {"loss": 0.5}), Row(2, {"loss": 0.2}), Row(3, {"loss": 0.4})]
    assert best(rows, best_metric="loss") is rows[1]
    assert best(rows, best_metric="loss", best_mode="max") is rows[0]


def test_on_a_tie_the_latest_wins_whatever_the_order_given() -> None:
    rows = [Row(3, {"acc": 0.9}), Row(1, {"acc": 0.9}), Row(2, {"acc": 0.5})]
    assert best(rows, best_metric="acc", best_mode="max") is rows[0]
    assert best(list(reversed(rows)), best_metric="acc", best_mode="max") is rows[0]


def test_only_numbers_count_and_no_metric_means_no_best() -> None:
    rows = [Row(1, {"acc": "high"}), Row(2, {"acc": True}), Row(3, {}), Row(4, {"acc": 1})]
    assert best(rows, best_metric="acc", best_mode="max") is rows[3]
    assert best(rows[:3], best_metric="acc") is None
    assert best(rows) is None


def test_due_every_steps_and_every_epochs() -> None:
    policy = CheckpointPolicy(every_steps=4, every_epochs=2)
    assert [s for s in range(1, 13) if policy.is_due(s, 1, end_of_epoch=False)] == [4, 8, 12]
    assert policy.is_due(5, 2, end_of_epoch=True) and not policy.is_due(5, 1, end_of_epoch=True)


def named_best(rows: list[Row], **policy: object) -> Row | None:
    return CheckpointPolicy.model_validate(policy).named_best(
        rows, metrics=lambda r: r.metrics, seq=lambda r: r.seq
    )


def test_what_best_names_is_the_best_by_the_metric_the_latest_on_a_tie() -> None:
    rows = [Row(1, {"loss": 0.2}), Row(2, {"loss": 0.2}), Row(3, {"loss": 0.4})]
    assert named_best(rows, best_metric="loss") is rows[1]
    assert named_best(list(reversed(rows)), best_metric="loss") is rows[1]
    assert named_best(rows, best_metric="loss", best_mode="max") is rows[2]


def test_what_best_names_counts_only_numbers() -> None:
    rows = [Row(1, {"acc": "0.99"}), Row(2, {"acc": True}), Row(3, {"acc": 0.5}), Row(4, {})]
    assert named_best(rows, best_metric="acc", best_mode="max") is rows[2]
    assert named_best([Row(1, {"acc": None}), Row(2, {"acc": [1]})], best_metric="acc") is None


def test_without_a_best_metric_best_names_the_latest_by_seq() -> None:
    rows = [Row(2, {"loss": 0.1}), Row(5, {"loss": 0.9}), Row(3)]
    assert named_best(rows) is rows[1]
    assert named_best([]) is None


def test_a_best_metric_no_checkpoint_reported_names_none() -> None:
    rows = [Row(1, {"loss": 0.1}), Row(2, {"loss": 0.2})]
    assert named_best(rows, best_metric="val_loss") is None
    assert named_best([], best_metric="loss") is None
