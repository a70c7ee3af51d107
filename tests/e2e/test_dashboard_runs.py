"""Looking at runs as an ML engineer does all day, in the browser (tests/e2e/test_dashboard.py's
Chromium and helpers), at 1,400 and 800 px wide: a long job's retention collapsed on its
timeline, a long failure message that does not widen the jobs list, headline metrics, charts
(overlay, log y, smoothing, x axis, hover read-out), a failed job that says why it has no
metric, one legend on the compare page, and the runs table. No job runs: the jobs, their
metrics and events are written into the stack's database as a worker would, on a queue no
worker serves. Screenshots go to tests/artifacts/ (or $LAUNCHBAY_TEST_ARTIFACTS)."""

import hashlib
import time
from typing import TYPE_CHECKING, Any

from sqlmodel import Session

from jobs.spec import JobSpec
from jobs.states import ExitReason, JobState
from service import records
from service.db import make_engine
from service.models import Checkpoint
from tests.e2e.test_dashboard import (
    browser,
    js,
    no_horizontal_overflow,
    pytestmark,
    save_screenshot,
    severe_console_entries,
    sign_in,
    text_of,
    wait,
)
from tests.support.stack import Stack

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

__all__ = ["browser", "pytestmark"]
EPOCHS = 40
KEEP_LAST = 4
STEPS_PER_EPOCH = 5
LONG_MESSAGE = "nproc_per_node=3 asks for more slots than the worker has: " + "x" * 600


def _seed(stack: Stack) -> dict[str, str]:
    """Jobs as their worker would have recorded them: `long` (40 epochs, a checkpoint per epoch,
    all but the last 4 retired by retention; loss, val_loss and accuracy), `short` (the same
    sweep, another lr) and `broken` (failed at launch with a long message, no metric)."""
    engine = make_engine(stack.database_url)
    ids = {}
    try:
        with Session(engine, expire_on_commit=False) as session:
            ids["long"] = _run(session, stack, "sweep-long", 0.1, EPOCHS)
            ids["short"] = _run(session, stack, "sweep-short", 0.3, 8)
            broken = records.create_job(session, _spec("too-wide", 0.1, sweep=False), owner="")
            records.transition_job(session, broken.id, JobState.STARTING, attempt=1)
            records.transition_job(
                session,
                broken.id,
                JobState.FAILED,
                attempt=1,
                exit_code=1,
                exit_reason=ExitReason.LAUNCH_ERROR,
                message=LONG_MESSAGE,
            )
            ids["broken"] = broken.id
    finally:
        engine.dispose()
    return ids


def _spec(name: str, lr: float, sweep: bool = True) -> JobSpec:
    return JobSpec(
        name=name,
        recipe="synthetic",
        queue="seeded",  # no worker serves it: nothing launches these jobs
        config={"lr": lr},
        tags={"sweep": "lr"} if sweep else {},
        checkpoint={"keep_last": KEEP_LAST, "best_metric": "val_loss"},
    )


def _run(session: Session, stack: Stack, name: str, lr: float, epochs: int) -> str:
    job = records.create_job(session, _spec(name, lr), owner="")
    records.transition_job(session, job.id, JobState.STARTING, attempt=1)
    records.transition_job(session, job.id, JobState.RUNNING, attempt=1)
    kept: list[str] = []
    start = time.time() - epochs * 60
    for epoch in range(epochs):
        points = []
        for i in range(STEPS_PER_EPOCH):
            step = epoch * STEPS_PER_EPOCH + i + 1
            loss = lr * 10 / step + 0.01 * (step % 3)
            ts = start + step * 12
            points.append(records.NewMetricPoint(step, epoch, "loss", loss, ts))
            points.append(records.NewMetricPoint(step, epoch, "accuracy", 1 - loss / 2, ts))
        points.append(records.NewMetricPoint(step, epoch, "val_loss", loss * 1.2, ts))
        records.append_metric_points(session, job.id, 1, points)
        kept.append(_checkpoint(session, stack, job.id, step, epoch))
        if len(kept) > KEEP_LAST:
            records.delete_checkpoints(session, job.id, 1, [kept.pop(0)])
    records.transition_job(
        session,
        job.id,
        JobState.SUCCEEDED,
        attempt=1,
        exit_code=0,
        exit_reason=ExitReason.COMPLETED,
    )
    return job.id


def _checkpoint(session: Session, stack: Stack, job_id: str, step: int, epoch: int) -> str:
    data = f"{job_id} {step}".encode()
    ckpt_id = hashlib.sha256(data).hexdigest()[:16]
    session.add(
        Checkpoint(
            id=ckpt_id,
            job_id=job_id,
            seq=records.allocate_seq(session, job_id),
            attempt=1,
            step=step,
            epoch=epoch,
            metrics={},
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            path=f"checkpoints/{job_id}/step-{step}.pt",
        )
    )
    session.commit()
    return ckpt_id


def _chart(driver: "WebDriver", metric: str, key: str) -> Any:
    return js(
        driver,
        "return document.querySelector(`#charts .chart[data-metric='${arguments[0]}']`)"
        "?.dataset[arguments[1]]",
        metric,
        key,
    )


def _goodput_parts(driver: "WebDriver", within: str) -> dict[str, float]:
    """The parts a goodput bar draws, by name: their seconds."""
    parts = js(
        driver,
        "return [...document.querySelectorAll(arguments[0] + ' .goodput-part')]"
        ".map(p => [p.dataset.part, Number(p.dataset.seconds)])",
        within,
    )
    return dict(parts or [])


def _choose(driver: "WebDriver", selector: str, value: str) -> None:
    js(
        driver,
        "const s = document.querySelector(arguments[0]); s.value = arguments[1];"
        "s.dispatchEvent(new Event('change'))",
        selector,
        value,
    )


def test_a_days_runs_read_at_a_glance(sqlite_stack: Stack, browser: "WebDriver") -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    ids = _seed(sqlite_stack)
    driver = browser
    driver.set_window_size(1400, 1000)
    sign_in(driver, sqlite_stack, sqlite_stack.admin_token)

    # The jobs list: the long message cut (whole on hover), apart from its exit reason; the
    # headline metrics, loss first.
    row = f"#jobs-body tr[data-job-id='{ids['broken']}']"
    wait("the failed job's row", lambda: text_of(driver, f"{row} .outcome"))
    assert text_of(driver, f"{row} .exit-reason") == "launch_error"
    assert js(driver, "return document.querySelector(arguments[0]).title", f"{row} .message-line")
    assert text_of(driver, f"{row} .outcome").startswith("launch_error\nnproc_per_node=3")
    assert no_horizontal_overflow(driver), "a long failure message widens the jobs list"
    long_row = f"#jobs-body tr[data-job-id='{ids['long']}']"
    names = js(
        driver,
        "return [...document.querySelectorAll(arguments[0] + ' .headline-metrics dt')]"
        ".map(dt => dt.textContent)",
        long_row,
    )
    assert names == ["loss", "val_loss", "accuracy"], names
    wait("each job's goodput bar", lambda: _goodput_parts(driver, long_row))
    save_screenshot(driver, "dashboard-jobs-1400.png")

    # The failed job says why it has no metric.
    driver.get(f"{sqlite_stack.url}/#/jobs/{ids['broken']}")
    wait("the job page", lambda: text_of(driver, "#timeline"))
    said = wait("the metrics panel", lambda: text_of(driver, "#no-metrics"))
    assert said.startswith("The job failed before reporting a metric (launch_error: nproc_per"), (
        said
    )

    # The long job: 36 retired checkpoints are one timeline entry, which opens to list them.
    driver.get(f"{sqlite_stack.url}/#/jobs/{ids['long']}")
    wait("the loss chart", lambda: _chart(driver, "loss", "series") == "1")
    # Where its time went: one bar, its parts in the legend, as GET …/goodput says.
    ledger = wait("the goodput bar", lambda: _goodput_parts(driver, "#goodput-panel"))
    with sqlite_stack.client() as http:
        answer = http.get(f"/v1/jobs/{ids['long']}/goodput").json()
    assert ledger == {p["name"]: p["seconds"] for p in answer["parts"] if p["seconds"] > 0}
    assert "training" in ledger, ledger
    assert text_of(driver, "#goodput-panel .goodput-headline").startswith("Goodput ")
    groups = "#timeline [data-state=checkpoint_deleted]"
    assert js(driver, "return document.querySelectorAll(arguments[0]).length", groups) == 1
    retired = EPOCHS - KEEP_LAST
    assert text_of(driver, f"{groups} summary") == f"{retired} checkpoints deleted by retention"
    height = js(driver, "return document.querySelector('#timeline').offsetHeight")
    assert height < 250, f"the timeline is {height} px high"  # one row of five entries
    driver.find_element(By.CSS_SELECTOR, f"{groups} summary").click()
    assert js(driver, "return document.querySelectorAll(arguments[0]).length", f"{groups} li") == (
        retired
    )
    assert text_of(driver, f"{groups} li") == "step 5, epoch 0"

    # Charts: val_loss overlaid on loss, log y, smoothing (the raw line kept), x axis in time.
    _choose(driver, "#charts .chart[data-metric=loss] .chart-overlay", "val_loss")
    wait("val_loss overlaid", lambda: _chart(driver, "loss", "series") == "2")
    legend = text_of(driver, "#charts .chart[data-metric=loss] .u-legend")
    assert "loss" in legend and "val_loss" in legend, legend
    _choose(driver, "#chart-y", "log")
    _choose(driver, "#chart-x", "relative")
    js(
        driver,
        "const s = document.querySelector('#chart-smoothing'); s.value = '0.8';"
        "s.dispatchEvent(new Event('input'))",
    )
    wait("the charts redrawn", lambda: _chart(driver, "loss", "drawn") == "relative/log/0.8")
    assert _chart(driver, "loss", "lines") == "4"  # two metrics, each raw and smoothed
    plot = driver.find_element(By.CSS_SELECTOR, "#charts .chart[data-metric=loss] .u-over")
    ActionChains(driver).move_to_element(plot).perform()
    readout = wait(
        "the hover read-out",
        lambda: js(
            driver,
            "return document.querySelector("
            "'#charts .chart[data-metric=loss] .u-legend .u-series:first-child .u-value')"
            "?.textContent",
        ),
    )
    assert readout.startswith("step ") and " UTC · +" in readout, readout
    save_screenshot(driver, "dashboard-job-1400.png")

    # Compare: one legend (the runs list) for every chart, a read-out on hover.
    js(driver, "performance.clearResourceTimings()")
    driver.get(f"{sqlite_stack.url}/#/compare?ids={ids['long']},{ids['short']}")
    wait(
        "the compare charts",
        lambda: (
            js(driver, "return document.querySelectorAll('#compare-charts .chart').length") == 3
        ),
    )
    assert js(driver, "return document.querySelectorAll('#compare-charts .u-legend').length") == 0
    # Each job's series as the server downsampled it: one request per job, bounded in size.
    reads = js(
        driver,
        "return performance.getEntriesByType('resource').map(e => e.name)"
        ".filter(n => n.includes('/metrics'))",
    )
    assert len(reads) == 2 and all("max_points=1000" in url for url in reads), reads
    assert js(driver, "return document.querySelectorAll('#compare-runs .run').length") == 2
    plot = driver.find_element(By.CSS_SELECTOR, "#compare-charts .chart[data-metric=loss] .u-over")
    ActionChains(driver).move_to_element(plot).perform()
    readout = wait(
        "the compare read-out", lambda: text_of(driver, "#compare-charts .chart-readout")
    )
    assert "sweep-long" in readout, readout
    save_screenshot(driver, "dashboard-compare-1400.png")

    # The runs table: spec fields that differ and each metric's last and best, sorted by
    # best loss; tick two to compare.
    driver.get(f"{sqlite_stack.url}/#/runs?tag=sweep=lr")
    wait(
        "the runs table",
        lambda: js(driver, "return document.querySelectorAll('#runs-body tr').length") == 2,
    )
    headers = js(
        driver,
        "return [...document.querySelectorAll('#runs-table th[data-key]')]"
        ".map(th => th.dataset.key)",
    )
    assert "spec:config.lr" in headers and "last:loss" in headers and "best:val_loss" in headers
    driver.find_element(By.CSS_SELECTOR, "th[data-key='best:loss'] button").click()
    sorted_by = "#runs-table th[data-key='best:loss'][aria-sort=descending]"
    wait(
        "sorted by best loss",
        lambda: js(
            driver,
            "return !!document.querySelector(arguments[0])"
            " && document.querySelectorAll('#runs-body tr').length === 2",
            sorted_by,
        ),
    )
    order = js(
        driver,
        "return [...document.querySelectorAll('#runs-body tr')].map(tr => tr.dataset.jobId)",
    )
    assert order == [ids["short"], ids["long"]]  # descending: the short run's best loss is higher
    for pick in driver.find_elements(By.CSS_SELECTOR, "#runs-body .pick"):
        pick.click()
    href = js(driver, "return document.querySelector('#runs-compare').getAttribute('href')")
    assert href and ids["long"] in href and ids["short"] in href
    assert no_horizontal_overflow(driver)
    save_screenshot(driver, "dashboard-runs-1400.png")

    # Goodput of the period: the bar of device-hours, a bar per day, the jobs that lost most.
    driver.get(f"{sqlite_stack.url}/#/goodput?since=7d")
    wait("the period's bar", lambda: _goodput_parts(driver, "#goodput-period"))
    # The days are read after the period's whole, one request per day.
    wait(
        "a bar per day",
        lambda: js(driver, "return document.querySelectorAll('#goodput-days li').length") > 0,
    )
    days = js(driver, "return document.querySelectorAll('#goodput-days li').length")
    assert days == 7, days
    held = js(driver, "return document.querySelectorAll('#goodput-days li .goodput-bar').length")
    assert held >= 1, held  # the day the seeded jobs ended
    lost = js(
        driver,
        "return [...document.querySelectorAll('#goodput-lost tr[data-job-id]')]"
        ".map(tr => tr.dataset.jobId)",
    )
    assert ids["long"] in lost and ids["short"] in lost, lost
    save_screenshot(driver, "dashboard-goodput-1400.png")

    # 800 px: nothing wider than the window.
    driver.set_window_size(800, 1000)
    for page, shot in (
        ("#/jobs", "dashboard-jobs-800.png"),
        (f"#/jobs/{ids['long']}", "dashboard-job-800.png"),
        ("#/runs?tag=sweep=lr", "dashboard-runs-800.png"),
        (f"#/compare?ids={ids['long']},{ids['short']}", "dashboard-compare-800.png"),
        ("#/goodput", "dashboard-goodput-800.png"),
    ):
        driver.get(f"{sqlite_stack.url}/{page}")
        wait(
            f"{page} drawn",
            lambda: js(driver, "return !!document.querySelector('#view section, #view article')"),
        )
        time.sleep(0.5)
        save_screenshot(driver, shot)
        assert no_horizontal_overflow(driver), f"{page} is wider than 800 px"
    assert severe_console_entries(driver) == []


LONG_STEPS = 30_000


def test_a_long_jobs_chart_zoomed_and_panned_reads_its_range_finer(
    sqlite_stack: Stack, browser: "WebDriver"
) -> None:
    """A job of 30,000 steps: its page reads a downsampled chart (at most 1,000 points); a drag
    zooms into a few hundred steps and, once settled, the range's own points are read (every
    one of them: the whole chart showed a few dozen there); shift + wheel pans the zoomed range
    and reads the new one; streamed or read, the zoom stays."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    engine = make_engine(sqlite_stack.database_url)
    try:
        with Session(engine, expire_on_commit=False) as session:
            job = records.create_job(session, _spec("long-zoom", 0.1), owner="")
            records.transition_job(session, job.id, JobState.STARTING, attempt=1)
            records.transition_job(session, job.id, JobState.RUNNING, attempt=1)
            start = time.time() - LONG_STEPS
            for first in range(1, LONG_STEPS + 1, 5000):
                points = [
                    records.NewMetricPoint(s, 0, "loss", 1 / s + (s % 7) * 1e-3, start + s)
                    for s in range(first, first + 5000)
                ]
                records.append_metric_points(session, job.id, 1, points)
    finally:
        engine.dispose()
    driver = browser
    driver.set_window_size(1400, 1000)
    sign_in(driver, sqlite_stack, sqlite_stack.admin_token)
    wait("the jobs list", lambda: text_of(driver, f"#jobs-body tr[data-job-id='{job.id}']"))
    driver.get(f"{sqlite_stack.url}/#/jobs/{job.id}")
    shown = int(wait("the loss chart", lambda: _chart(driver, "loss", "points")))
    assert 500 <= shown <= 1000, shown
    plot = driver.find_element(By.CSS_SELECTOR, "#charts .chart[data-metric=loss] .u-over")
    width = plot.size["width"]
    # Drag across 2 % of the chart, a third of the way in (about 600 steps).
    ActionChains(driver).move_to_element_with_offset(
        plot, -width // 6, 0
    ).click_and_hold().move_by_offset(width // 50, 0).release().perform()
    zoom = wait("a zoom", lambda: _chart(driver, "loss", "zoom"))
    low, high = (float(x) for x in zoom.split(":"))
    assert 0 < high - low < LONG_STEPS / 20, zoom
    filled = wait("the zoomed range read", lambda: _chart(driver, "loss", "filled"))
    points = int(_chart(driver, "loss", "points"))
    assert points >= shown + (high - low) * 0.9, (shown, points, zoom)  # each step of the range
    reads = js(
        driver,
        "return performance.getEntriesByType('resource').map(e => e.name)"
        ".filter(n => n.includes('/metrics') && n.includes('until='))",
    )
    assert len(reads) == 1 and "max_points=1000" in reads[0], reads
    # Shift + wheel: a tenth of the range to the right, then that range's points.
    js(
        driver,
        "arguments[0].dispatchEvent(new WheelEvent('wheel', "
        "{deltaY: 100, shiftKey: true, bubbles: true, cancelable: true}))",
        plot,
    )
    moved = wait("a pan", lambda: (z := _chart(driver, "loss", "zoom")) != zoom and z)
    new_low, new_high = (float(x) for x in moved.split(":"))
    assert new_low > low and abs((new_high - new_low) - (high - low)) < 1e-6 * high, moved
    wait("the panned range read", lambda: _chart(driver, "loss", "filled") not in (None, filled))
    assert _chart(driver, "loss", "zoom") == moved  # the read kept the zoom
    assert not severe_console_entries(driver)
