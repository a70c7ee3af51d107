"""An install's environment from before a variable was removed: read, ignored, said once."""

import pytest

from service.settings import Settings, removed_variables_note


def test_a_removed_scheduler_setting_is_ignored_and_named() -> None:
    old = {"LAUNCHBAY_SCHEDULER": "fifo", "LAUNCHBAY_DISPATCH_INTERVAL_S": "2"}
    [note] = removed_variables_note(old)
    assert note.startswith("LAUNCHBAY_SCHEDULER='fifo': the dispatcher admits every job now")
    assert removed_variables_note({"LAUNCHBAY_DISPATCH_INTERVAL_S": "2"}) == []


def test_settings_start_with_the_removed_variable_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHBAY_SCHEDULER", "fifo")
    settings = Settings()
    assert not hasattr(settings, "scheduler")
