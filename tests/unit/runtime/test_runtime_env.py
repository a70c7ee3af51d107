"""The environment contract: parsing LAUNCHBAY_* and the checkpoint schedule."""

from __future__ import annotations

import pytest

from jobs.runtime import CheckpointPolicy, RuntimeEnvError, checkpoint_due, env, read_config


def test_config_defaults_to_empty_and_parses_a_json_object(monkeypatch: pytest.MonkeyPatch) -> None:
    assert read_config() == {}
    monkeypatch.setenv(env.CONFIG, "")
    assert read_config() == {}
    monkeypatch.setenv(env.CONFIG, '{"epochs": 3, "lr": 0.01}')
    assert read_config() == {"epochs": 3, "lr": 0.01}


@pytest.mark.parametrize("raw", ["{epochs: 3}", "[1, 2]", '"text"'])
def test_config_that_is_not_a_json_object_is_refused(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv(env.CONFIG, raw)
    with pytest.raises(RuntimeEnvError, match=env.CONFIG):
        read_config()


def test_choices_default_and_refuse_unknown_values(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (env.amp_mode(), env.device_choice(), env.backend_choice()) == ("none", "auto", "auto")
    monkeypatch.setenv(env.AMP, "BF16")
    assert env.amp_mode() == "bf16"
    monkeypatch.setenv(env.AMP, "fp8")
    with pytest.raises(RuntimeEnvError, match="fp8"):
        env.amp_mode()


def test_collective_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    assert env.collective_timeout_s() is None
    monkeypatch.setenv(env.COLLECTIVE_TIMEOUT_S, "90")
    assert env.collective_timeout_s() == 90
    monkeypatch.setenv(env.COLLECTIVE_TIMEOUT_S, "soon")
    with pytest.raises(RuntimeEnvError):
        env.collective_timeout_s()


def test_checkpoint_policy_defaults_to_every_epoch() -> None:
    assert env.checkpoint_policy() == CheckpointPolicy(every_steps=None, every_epochs=1)


def test_checkpoint_policy_from_the_spec_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        env.CHECKPOINT,
        '{"every_steps": 50, "every_epochs": null, "keep_last": 2, '
        '"best_metric": "accuracy", "best_mode": "max"}',
    )
    assert env.checkpoint_policy() == CheckpointPolicy(
        every_steps=50, every_epochs=None, keep_last=2, best_metric="accuracy", best_mode="max"
    )
    monkeypatch.setenv(env.CHECKPOINT, '{"best_mode": "largest"}')
    with pytest.raises(RuntimeEnvError, match="best_mode"):
        env.checkpoint_policy()
    monkeypatch.setenv(env.CHECKPOINT, '{"every_steps": -1}')
    with pytest.raises(RuntimeEnvError, match="every_steps"):
        env.checkpoint_policy()


def test_checkpoint_due_every_steps_and_every_epochs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env.CHECKPOINT, '{"every_steps": 4, "every_epochs": 2}')
    due_steps = [s for s in range(1, 13) if checkpoint_due(s, 1, end_of_epoch=False)]
    assert due_steps == [4, 8, 12]
    assert not checkpoint_due(5, 1, end_of_epoch=True)
    assert checkpoint_due(5, 2, end_of_epoch=True)
    assert not checkpoint_due(6, 2, end_of_epoch=False)
    # Unset: the spec's default, a checkpoint at the end of every epoch and nowhere else.
    monkeypatch.delenv(env.CHECKPOINT)
    assert checkpoint_due(7, 3, end_of_epoch=True)
    assert not checkpoint_due(8, 3, end_of_epoch=False)
