"""F10: panning the chart of a 1,000,000-point job in a real browser (Debian's Chromium,
headless, driven by Selenium), side by side with a 1,000-point job in rotated rounds.

Each round opens the job's page, zooms its loss chart into a tenth of the run by a drag, waits
for the range's points to be read, then pans it with shift + wheel once per animation frame for
`FRAMES` frames. A frame's work is timed in the page from the wheel event to the end of the
chart's redraw (uPlot redraws in a microtask queued by the pan, which runs before the one queued
after it), and the frames' spacing is read from `requestAnimationFrame`'s timestamps. Goals:
the big job's 95th-percentile frame work within a 60 fps frame (16.7 ms), and within 1.5× the
small job's. Without Chromium it reports that it did not run."""

import statistics
import tempfile
import time
from typing import Any

from bench.common import Result, api_stack
from bench.p9_history_output import running_job, seed_output
from devstack.browser import CHROMIUM, CHROMIUM_FLAGS
from service.db import make_engine

BIG_POINTS, SMALL_POINTS = 1_000_000, 1_000
FRAMES, ROUNDS = 120, 4
FRAME_MS = 1000 / 60

# Pans the loss chart once a frame; answers each frame's work (ms) and the frames' spacing.
PAN_SCRIPT = """
const done = arguments[arguments.length - 1];
const [frames] = arguments;
const plot = document.querySelector("#charts .chart[data-metric=loss] .u-over");
const work = [], stamps = [];
let n = 0;
function frame(now) {
  stamps.push(now);
  const began = performance.now();
  plot.dispatchEvent(new WheelEvent("wheel",
    {deltaY: n % 40 < 20 ? 30 : -30, shiftKey: true, bubbles: true, cancelable: true}));
  queueMicrotask(() => work.push(performance.now() - began));
  if (++n < frames) requestAnimationFrame(frame);
  else setTimeout(() => done({work, stamps}), 50);
}
requestAnimationFrame(frame);
"""


def chart_attr(driver: Any, key: str) -> str | None:
    return driver.execute_script(
        "return document.querySelector('#charts .chart[data-metric=loss]')?.dataset[arguments[0]]",
        key,
    )


def wait_for(what: str, condition: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"F10: timed out waiting for {what}")
        time.sleep(0.05)
    return result


def pan_once(driver: Any, url: str, job_id: str) -> tuple[list[float], list[float], int]:
    """One round on one job: (each frame's work in ms, frame spacings in ms, points charted)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    driver.get(f"{url}/#/jobs")
    driver.get(f"{url}/#/jobs/{job_id}")
    wait_for("the loss chart", lambda: chart_attr(driver, "points"))
    plot = driver.find_element(By.CSS_SELECTOR, "#charts .chart[data-metric=loss] .u-over")
    width = plot.size["width"]
    drag = ActionChains(driver).move_to_element_with_offset(plot, -width // 4, 0)
    drag.click_and_hold().move_by_offset(width // 10, 0).release().perform()
    wait_for("a zoom", lambda: chart_attr(driver, "zoom"))
    wait_for("the zoomed range's points", lambda: chart_attr(driver, "filled"))
    points = int(chart_attr(driver, "points") or 0)
    answer = driver.execute_async_script(PAN_SCRIPT, FRAMES)
    stamps = answer["stamps"]
    spacing = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    return answer["work"], spacing, points


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


def run() -> list[Result]:
    what = "pan a 1M-point job's chart: p95 frame work, and ÷ a 1k-point job's"
    if not CHROMIUM.exists():
        return [Result("F10", what, "not run: no /usr/bin/chromium", "≤ 16.7 ms; ≤ 1.5×", None)]
    from selenium import webdriver

    work: dict[str, list[float]] = {"big": [], "small": []}
    spacing: dict[str, list[float]] = {"big": [], "small": []}
    charted: dict[str, int] = {}
    with api_stack() as stack:
        engine = make_engine(stack.database_url)
        try:
            jobs = {"big": running_job(engine, "big"), "small": running_job(engine, "small")}
            seed_output(engine, jobs["big"], points=BIG_POINTS, lines=0)
            seed_output(engine, jobs["small"], points=SMALL_POINTS, lines=0)
        finally:
            engine.dispose()
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for flag in CHROMIUM_FLAGS:
            options.add_argument(flag)
        profile = tempfile.mkdtemp(prefix="launchbay-bench-chromium-")
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(options=options)
        try:
            driver.set_script_timeout(60)
            driver.get(f"{stack.url}/#/signin")
            driver.execute_script(
                "sessionStorage.setItem('launchbay.token', arguments[0])", stack.admin_token
            )
            for round_ in range(ROUNDS):
                order = ["big", "small"] if round_ % 2 == 0 else ["small", "big"]
                for name in order:
                    frame_work, frames, points = pan_once(driver, stack.url, jobs[name])
                    if round_:  # the first round warms the browser up
                        work[name] += frame_work
                        spacing[name] += frames
                    charted[name] = points
        finally:
            driver.quit()
    big, small = p95(work["big"]), p95(work["small"])
    fps = 1000 / statistics.median(spacing["big"])
    return [
        Result(
            "F10",
            what,
            f"{big:.2f} ms (small job: {small:.2f} ms; {big / small:.2f}×); "
            f"{fps:.0f} frames/s while panning",
            "≤ 16.7 ms; ≤ 1.5×",
            big <= FRAME_MS and big <= 1.5 * small,
            f"{BIG_POINTS:,} and {SMALL_POINTS:,} points (4 metrics); {charted['big']} and "
            f"{charted['small']} points on the panned chart; {FRAMES} frames × "
            f"{ROUNDS - 1} rounds each",
        )
    ]
