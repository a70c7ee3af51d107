"""A job's truthful outcome in the browser (tests/e2e/test_dashboard.py's Chromium and helpers):
its warnings on the jobs list and on its page, and the runs that report the same steps (two
attempts, and an elastic restart within the first) drawn as lines of their own."""

from pathlib import Path
from typing import TYPE_CHECKING

from tests.e2e.test_dashboard import browser, js, pytestmark, sign_in, text_of, wait
from tests.e2e.test_launch_styles import upload
from tests.support.stack import Stack

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

__all__ = ["browser", "pytestmark"]
PROGRAM = Path(__file__).resolve().parent / "programs" / "outcomes" / "reruns_steps.py"


def test_warnings_shown_and_each_run_drawn_apart(sqlite_stack: Stack, browser: "WebDriver") -> None:
    with sqlite_stack.client() as http:
        spec = {
            "name": "reruns",
            "code": {"code_id": upload(http, PROGRAM), "entrypoint": PROGRAM.name},
            "launcher": "torchrun",
            "nproc_per_node": 1,
            "device": "cpu",
            "max_restarts": 1,
            "max_retries": 1,
            "checkpoint": {"best_metric": "acc"},
        }
        response = http.post("/v1/jobs", json=spec)
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        job = sqlite_stack.wait_for_state(http, job_id, {"succeeded"}, timeout=120)
        [warning] = job["warnings"]
        assert warning.startswith("attempt 2: best_metric 'acc' was never reported")
        points = http.get(f"/v1/jobs/{job_id}/metrics").json()["items"]
        assert sorted((p["attempt"], p["step"]) for p in points) == [
            (1, 1), (1, 1), (1, 2), (1, 2), (2, 1), (2, 2)
        ]  # fmt: skip

    driver = browser
    sign_in(driver, sqlite_stack, sqlite_stack.admin_token)
    row = f"#jobs-body tr[data-job-id='{job_id}'] .warning-line"
    wait("the warning on the jobs list", lambda: text_of(driver, row))
    assert text_of(driver, row).startswith("⚠ 1 warning: attempt 2: best_metric 'acc'")

    driver.get(f"{sqlite_stack.url}/#/jobs/{job_id}")
    wait("the warnings on the job page", lambda: text_of(driver, "#job-warnings"))
    assert text_of(driver, "#job-warnings") == warning
    chart = "#charts .chart[data-metric=loss]"
    wait(
        "a line per run",
        lambda: (
            js(driver, "return document.querySelector(arguments[0])?.dataset.runs", chart) == "3"
        ),
    )
    legend = text_of(driver, f"{chart} .u-legend")
    for label in ("attempt 1", "attempt 1, restart 1", "attempt 2"):
        assert label in legend, legend
