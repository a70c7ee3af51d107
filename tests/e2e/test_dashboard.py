"""The web dashboard in a real browser: Debian's chromium, headless, driven by Selenium and
its chromedriver, against a real stack (api + worker + torchrun). `scripts/install-browser.sh`
installs the browser; without /usr/bin/chromium these tests skip, and only then. The tests that
neither restart the API nor add a worker share one stack (`shared_sqlite_stack`)."""

import base64
import hashlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from devstack.browser import CHROMEDRIVER, CHROMIUM, CHROMIUM_FLAGS
from tests.support.stack import Stack

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

GETTING_STARTED = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"
ARTIFACTS = Path(
    os.environ.get("LAUNCHBAY_TEST_ARTIFACTS", Path(__file__).parents[1] / "artifacts")
)

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium: run scripts/install-browser.sh"
)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator["WebDriver"]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    downloads = tmp_path / "downloads"
    downloads.mkdir()
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    options.add_experimental_option(
        "prefs",
        {
            "download.default_directory": str(downloads),
            "download.prompt_for_download": False,
            "safebrowsing.enabled": False,
        },
    )
    # The Debian chromedriver, named: Selenium Manager would try to download one.
    service = Service(str(CHROMEDRIVER), log_output=str(tmp_path / "chromedriver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.downloads = downloads  # type: ignore[attr-defined]
    try:
        yield driver
    finally:
        driver.quit()


def wait(what: str, condition: Callable[[], Any], timeout: float = 15) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def js(driver: "WebDriver", script: str, *args: Any) -> Any:
    return driver.execute_script(script, *args)


def text_of(driver: "WebDriver", selector: str) -> str:
    return str(js(driver, "return document.querySelector(arguments[0])?.innerText ?? ''", selector))


def sign_in(driver: "WebDriver", stack: Stack, token: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{stack.url}/#/signin")
    field = wait("the sign-in form", lambda: driver.find_elements(By.ID, "token"))[0]
    field.clear()
    field.send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#signin-form button[type=submit]").click()


def fill(driver: "WebDriver", field_id: str, value: str) -> None:
    from selenium.webdriver.common.by import By

    element = driver.find_element(By.ID, field_id)
    element.clear()
    element.send_keys(value)


def severe_console_entries(driver: "WebDriver") -> list[dict[str, Any]]:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def save_screenshot(driver: "WebDriver", name: str) -> Path:
    """The whole page as ARTIFACTS/NAME (tests/artifacts, or $LAUNCHBAY_TEST_ARTIFACTS)."""
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    path.write_bytes(base64.b64decode(shot["data"]))
    print(f"screenshot: {path}")
    return path


def no_horizontal_overflow(driver: "WebDriver") -> bool:
    return bool(
        js(
            driver,
            "return document.documentElement.scrollWidth <= "
            "document.documentElement.clientWidth + 1",
        )
    )


def test_a_synthetic_job_submitted_and_followed_in_the_browser(
    sqlite_stack: Stack, browser: "WebDriver"
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver = browser
    sign_in(driver, sqlite_stack, sqlite_stack.admin_token)
    wait("the jobs page", lambda: js(driver, "return !!document.querySelector('#jobs-body')"))

    driver.get(f"{sqlite_stack.url}/#/submit")
    wait("the recipe form", lambda: driver.find_elements(By.ID, "field-config-epochs"))
    Select(driver.find_element(By.ID, "field-recipe")).select_by_value("synthetic")
    fill(driver, "field-name", "browser-e2e")
    fill(driver, "field-nproc_per_node", "2")
    fill(driver, "field-config-epochs", "2")
    fill(driver, "field-config-log_every_steps", "2")
    fill(driver, "field-config-sleep_per_step_s", "0.2")
    driver.find_element(By.CSS_SELECTOR, "#form-mode [data-action=submit]").click()

    prefix = f"{sqlite_stack.url}/#/jobs/"
    wait(
        "the job page",
        lambda: driver.current_url.startswith(prefix) and len(driver.current_url) > len(prefix),
    )
    job_id = driver.current_url.removeprefix(prefix)

    def state() -> str:
        return str(
            js(
                driver,
                "return document.querySelector('#job-state [data-state]')?.dataset.state ?? ''",
            )
        )

    # While it runs, the API restarts: the page's event stream drops, and resumes after the
    # last event it had (Last-Event-ID), so nothing is missed and nothing shown twice.
    wait(
        "the first metric",
        lambda: js(driver, "return !!document.querySelector('#charts .chart')"),
        timeout=45,
    )
    assert severe_console_entries(driver) == []
    sqlite_stack.stop_api()
    sqlite_stack.start_api()
    try:
        wait("the job to succeed", lambda: state() == "succeeded", timeout=45)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}; page shows {state()!r}:\n{text_of(driver, 'main')}\n"
            f"--- api\n{sqlite_stack.api_log()}\n--- workers\n{sqlite_stack.worker_logs()}"
        ) from None
    wait(
        "the event stream to end",
        lambda: js(
            driver, "return document.querySelector('#stream-status').dataset.status === 'ended'"
        ),
    )
    outage = severe_console_entries(driver)  # requests refused while the API was down
    assert all(e.get("source") == "network" for e in outage), outage
    states = js(
        driver, "return [...document.querySelectorAll('#timeline li')].map(li => li.dataset.state)"
    )
    assert states == ["queued", "starting", "running", "succeeded"], states
    assert "completed" in text_of(driver, "#timeline")

    points = wait(
        "a chart with points",
        lambda: js(
            driver,
            "return Math.max(0, ...[...document.querySelectorAll('#charts .chart')]"
            ".filter(c => c.querySelector('canvas')).map(c => Number(c.dataset.points)))",
        ),
    )
    assert points > 0

    with sqlite_stack.client() as http:
        loss_points = http.get(f"/v1/jobs/{job_id}/metrics", params={"name": "loss"}).json()
        logs = http.get(f"/v1/jobs/{job_id}/logs", params={"limit": 10_000}).json()["items"]
    shown = js(driver, "return document.querySelector('#charts [data-metric=loss]').dataset.points")
    assert int(shown) == len(loss_points["items"])

    for rank in (0, 1):
        driver.find_element(By.CSS_SELECTOR, f"#logs [data-rank='{rank}']").click()
        lines = wait(
            f"rank {rank}'s logs",
            lambda r=rank: js(
                driver,
                "const pane = document.querySelector('#log-pane');"
                "return pane.dataset.rank === String(arguments[0]) && "
                "pane.querySelectorAll('.log-line').length",
                r,
            ),
        )
        assert lines == len([line for line in logs if line["rank"] == rank]) > 0

    link = wait(
        "a checkpoint", lambda: driver.find_elements(By.CSS_SELECTOR, "#checkpoints a.download")
    )[0]
    expected_sha = link.get_attribute("data-sha256")
    link.click()
    downloads: Path = driver.downloads  # type: ignore[attr-defined]
    saved = wait(
        "the downloaded checkpoint",
        lambda: [
            p
            for p in downloads.iterdir()
            if not p.name.startswith(".") and not p.name.endswith(".crdownload")
        ],
    )
    assert hashlib.sha256(saved[0].read_bytes()).hexdigest() == expected_sha
    assert saved[0].name.startswith("browser-e2e-")
    assert "sha256 verified" in text_of(driver, "#download-status")
    assert job_id in text_of(driver, ".summary")
    # A finished job's operations panels: no stacks were recorded, no webhook is registered.
    wait("the stacks panel", lambda: "No stacks recorded" in text_of(driver, "#stacks"))
    wait("the deliveries panel", lambda: "No webhooks" in text_of(driver, "#deliveries"))

    save_screenshot(driver, "dashboard-job.png")

    driver.set_window_size(390, 844)
    assert no_horizontal_overflow(driver), "the job page is wider than a phone screen"
    save_screenshot(driver, "dashboard-job-narrow.png")
    driver.get(f"{sqlite_stack.url}/#/jobs")
    wait(
        "the job in the jobs table",
        lambda: js(
            driver,
            "return document.querySelector(`#jobs-body tr[data-job-id='${arguments[0]}']`)"
            "?.dataset.state === 'succeeded'",
            job_id,
        ),
    )
    assert no_horizontal_overflow(driver), "the jobs page is wider than a phone screen"
    save_screenshot(driver, "dashboard-jobs-narrow.png")

    assert severe_console_entries(driver) == []


def test_a_wrong_token_and_api_errors_show_readable_messages(
    shared_sqlite_stack: Stack, browser: "WebDriver"
) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    sign_in(driver, shared_sqlite_stack, "lb_not-a-real-token")
    message = wait("the wrong-token message", lambda: text_of(driver, "#signin-error"))
    assert "not accepted" in message and "token" in message, message
    save_screenshot(driver, "dashboard-wrong-token.png")

    sign_in(driver, shared_sqlite_stack, shared_sqlite_stack.admin_token)
    wait("the jobs page", lambda: js(driver, "return !!document.querySelector('#jobs-body')"))

    driver.get(f"{shared_sqlite_stack.url}/#/jobs/no-such-job")
    panel = wait("the not-found message", lambda: text_of(driver, ".error-panel"))
    assert "404" in panel and "no job 'no-such-job'" in panel, panel

    driver.get(f"{shared_sqlite_stack.url}/#/submit")
    wait("the recipe form", lambda: driver.find_elements(By.ID, "field-config-lr"))
    fill(driver, "field-config-lr", "-1")
    driver.find_element(By.CSS_SELECTOR, "#form-mode [data-action=submit]").click()
    beside = wait(
        "the error beside the lr field", lambda: text_of(driver, "[data-error-for='config.lr']")
    )
    assert "greater than 0" in beside, beside
    assert driver.find_element(By.ID, "field-config-lr").get_attribute("aria-invalid") == "true"
    save_screenshot(driver, "dashboard-submit-errors.png")

    driver.find_element(By.CSS_SELECTOR, "[data-mode=yaml]").click()
    editor = driver.find_element(By.ID, "spec-text")
    editor.clear()
    editor.send_keys("name: typo\nrecipe: synthetic\nconfig:\n  epochs: 1\nnprocs: 2\n")
    driver.find_element(By.CSS_SELECTOR, "#yaml-mode [data-action=submit]").click()
    listed = wait("the YAML spec's errors", lambda: text_of(driver, "#spec-errors"))
    assert "nprocs" in listed and "line 5" in listed, listed

    # The jobs page cancels a job (a queued one here: no worker serves its queue).
    with shared_sqlite_stack.client() as http:
        spec = {"name": "to-cancel", "recipe": "synthetic", "queue": "nobody"}
        job_id = http.post("/v1/jobs", json=spec).json()["id"]
    driver.get(f"{shared_sqlite_stack.url}/#/jobs")
    row = f"#jobs-body tr[data-job-id='{job_id}']"
    cancel = wait(
        "the cancel button",
        lambda: driver.find_elements(By.CSS_SELECTOR, f"{row} [data-action=cancel]"),
    )[0]
    cancel.click()
    assert cancel.text == "Confirm cancel"
    cancel.click()
    wait(
        "the job to be cancelled",
        lambda: (
            js(driver, "return document.querySelector(arguments[0])?.dataset.state", row)
            == "cancelled"
        ),
    )

    # The refusals above are the only errors: the browser logs each as a failed request.
    unexpected = [
        e
        for e in severe_console_entries(driver)
        if not (
            e.get("source") == "network" and any(f" {s} " in e["message"] for s in (401, 404, 422))
        )
    ]
    assert unexpected == []


def test_a_multi_node_job_shows_its_nodes_and_labels_ranks_by_node(
    sqlite_stack: Stack, browser: "WebDriver"
) -> None:
    sqlite_stack.start_worker(LAUNCHBAY_WORKER_HOST="127.0.0.1")  # the second node
    spec = {
        "name": "two-nodes",
        "recipe": "synthetic",
        "nnodes": 2,
        "nproc_per_node": 1,
        "config": {"epochs": 1},
    }
    with sqlite_stack.client() as http:
        job_id = http.post("/v1/jobs", json=spec).json()["id"]
        sqlite_stack.wait_for_state(http, job_id, {"succeeded"}, timeout=120)
        nodes = http.get(f"/v1/jobs/{job_id}/nodes").json()["items"]
    driver = browser
    sign_in(driver, sqlite_stack, sqlite_stack.admin_token)
    wait("the jobs page", lambda: js(driver, "return !!document.querySelector('#jobs-body')"))
    driver.get(f"{sqlite_stack.url}/#/jobs/{job_id}")
    rows = wait(
        "the nodes table",
        lambda: js(
            driver,
            "return [...document.querySelectorAll('#nodes tbody tr')]"
            ".map(tr => [...tr.cells].map(td => td.innerText))",
        ),
    )
    assert sorted((int(r[1]), r[2], r[5]) for r in rows) == sorted(
        (n["node"], n["worker"], "succeeded") for n in nodes
    )

    def node_labels() -> list[str] | None:
        tabs: list[str] = js(
            driver, "return [...document.querySelectorAll('#logs .tab')].map(t => t.innerText)"
        )
        return tabs if len(tabs) == 2 and all(t.startswith("node ") for t in tabs) else None

    labels = wait("rank tabs labelled by node", node_labels)
    assert sorted(label.split("/")[1] for label in labels) == ["rank 0", "rank 1"]
    assert not severe_console_entries(driver)
    save_screenshot(driver, "dashboard-multi-node.png")


def readme_sdk_snippet() -> str:
    """The SDK snippet the README's docs give first (docs/getting-started.md, "From Python")."""
    section = GETTING_STARTED.read_text().split("## From Python", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "no python block under '## From Python'"
    return match.group(1)


def test_runs_compared_and_failures_explained(
    shared_sqlite_stack: Stack, browser: "WebDriver"
) -> None:
    """The SDK snippet of docs/getting-started.md, as written, run twice: the same outcome, two
    jobs. With a job that cannot launch (`device: cuda` on a worker with no GPU, which the
    dispatcher, counting devices, places all the same): the jobs list says why
    it failed and filters; the compare view overlays the two runs' metrics (same specs), and
    shows the differences of a run's spec and the failed job's; the failed job's ranks say they
    wrote nothing; the worker's healthcheck passes against the live worker."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    with shared_sqlite_stack.client() as http:
        # On a queue no live worker serves yet (else it is refused at once), then admitted onto
        # one of 1 slot, which has no GPU.
        broken_spec = {
            "name": "too-wide",
            "recipe": "synthetic",
            "nproc_per_node": 1,
            "device": "cuda",
        }
        broken = http.post("/v1/jobs", json={**broken_spec, "queue": "wide"}).json()["id"]
    shared_sqlite_stack.start_worker("wide", args=["--slots", "1"])
    code = readme_sdk_snippet()
    assert "idempotency_key" not in code  # no fixed key that would replay the first job
    outputs = []
    for _ in range(2):
        run = subprocess.run(
            [sys.executable, "-c", code],
            cwd=shared_sqlite_stack.root,
            env=shared_sqlite_stack.env(),
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert run.returncode == 0, (
            f"{run.stderr}\n--- workers\n{shared_sqlite_stack.worker_logs()}"
        )
        outputs.append(run.stdout)
    assert outputs[0] == outputs[1]  # seeded: the same curve, the same best checkpoint
    lines = outputs[0].splitlines()
    assert "succeeded completed" in lines and lines[-1].startswith("best checkpoint: step ")
    assert any(line.startswith("step ") and " loss " in line for line in lines)
    with shared_sqlite_stack.client() as http:
        runs = [
            job["id"] for job in http.get("/v1/jobs", params={"name": "sdk-demo"}).json()["items"]
        ]
        assert len(runs) == 2  # two snippet runs, two jobs: none replayed
        failed = shared_sqlite_stack.wait_for_state(http, broken, {"failed"})
    assert failed["exit_reason"] == "launch_error" and failed["message"]

    check = subprocess.run(
        [sys.executable, "-m", "client.cli", "worker", "--check"],
        env=shared_sqlite_stack.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stderr
    assert "heart-beat" in check.stdout

    driver = browser
    sign_in(driver, shared_sqlite_stack, shared_sqlite_stack.admin_token)
    wait("the jobs page", lambda: js(driver, "return !!document.querySelector('#jobs-body')"))
    row = f"#jobs-body tr[data-job-id='{broken}']"
    outcome = wait("the failed job's reason", lambda: text_of(driver, f"{row} .outcome"))
    assert "launch_error" in outcome and failed["message"].splitlines()[0][:40] in outcome
    age = js(driver, "return document.querySelector(arguments[0] + ' time').title", row)
    assert age.endswith(" UTC") and age[:4].isdigit(), age

    # Filter by name, then compare every run of that name.
    fill(driver, "name-filter", "sdk-demo\n")
    wait(
        "the name filter",
        lambda: (
            js(driver, "return document.querySelectorAll('#jobs-body tr').length") == 2
            and "name=sdk-demo" in driver.current_url
        ),
    )
    driver.find_element(By.ID, "compare-all").click()
    charts = "#compare-charts .chart[data-metric=loss]"
    wait(
        "the overlaid loss chart",
        lambda: (
            js(driver, "return document.querySelector(arguments[0])?.dataset.series", charts) == "2"
        ),
    )
    assert text_of(driver, "#same-specs") == "The specs are the same."
    # One legend for every chart: the runs list, each run in its colour.
    legend = js(driver, "return document.querySelector('#compare-runs').textContent")
    assert "sdk-demo (" in legend and "--" not in legend, legend
    save_screenshot(driver, "dashboard-compare.png")

    # Or tick jobs on the list.
    driver.get(f"{shared_sqlite_stack.url}/#/jobs")
    for job_id in (runs[0], broken):
        wait(
            "a row",
            lambda j=job_id: driver.find_elements(By.CSS_SELECTOR, f"[data-job-id='{j}'] .pick"),
        )[0].click()
    driver.find_element(By.ID, "compare-selected").click()
    wait(
        "the compare page",
        lambda: js(driver, "return document.querySelector('.compare-page')?.dataset.runs") == "2",
    )
    diff = wait(
        "the spec differences",
        lambda: js(
            driver,
            "return [...document.querySelectorAll('#spec-diff tbody tr')]"
            ".map(tr => [...tr.children].map(c => c.textContent.trim()))",
        ),
    )
    assert ["device", "auto", "cuda"] in diff, diff  # in the order ticked
    assert ["config.num_samples", "256", "768"] in diff and ["name", "sdk-demo", "too-wide"] in diff

    # The failed job: its ranks wrote nothing, and say so; its id does not wrap.
    driver.get(f"{shared_sqlite_stack.url}/#/jobs/{broken}")
    empty = wait("the empty rank's note", lambda: text_of(driver, "#log-empty"))
    assert empty == "No output: this rank wrote nothing."
    assert js(driver, "return document.querySelector('#log-pane').hidden") is True
    assert (
        js(driver, "return document.querySelector('.summary .job-id').getClientRects().length") == 1
    )
    created = js(
        driver,
        "return [...document.querySelectorAll('.summary-item')]"
        ".find(i => i.querySelector('dt').textContent === 'Created').querySelector('dd').innerText",
    )
    assert created.endswith(" UTC") and created[:4].isdigit(), created

    # The submit form: hints without backticks, and the checkpoint policy.
    driver.get(f"{shared_sqlite_stack.url}/#/submit")
    wait("the recipe form", lambda: driver.find_elements(By.ID, "field-checkpoint-best_metric"))
    assert "`" not in text_of(driver, "#form-mode")
    fill(driver, "field-queue", "nobody")
    fill(driver, "field-checkpoint-best_metric", "val_loss")
    fill(driver, "field-checkpoint-keep_last", "2")
    Select(driver.find_element(By.ID, "field-checkpoint-best_mode")).select_by_value("min")
    driver.find_element(By.CSS_SELECTOR, "#form-mode [data-action=submit]").click()
    prefix = f"{shared_sqlite_stack.url}/#/jobs/"
    wait(
        "the new job's page",
        lambda: driver.current_url.startswith(prefix) and len(driver.current_url) > len(prefix),
    )
    with shared_sqlite_stack.client() as http:
        spec = http.get(f"/v1/jobs/{driver.current_url.removeprefix(prefix)}").json()["spec"]
    assert spec["checkpoint"]["best_metric"] == "val_loss" and spec["checkpoint"]["keep_last"] == 2

    driver.set_window_size(390, 844)
    assert no_horizontal_overflow(driver), "the job page is wider than a phone screen"
    assert severe_console_entries(driver) == []
