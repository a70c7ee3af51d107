"""The GPU check's report (the rows DESIGN.md names, as JSON and markdown) and its kit (what
travels to a GPU host that reaches no package registry)."""

import json
from pathlib import Path

from bench.gpu_check import kit
from bench.gpu_check.report import Row, excerpt, not_run, render_markdown, verdict, write_report

ROOT = Path(__file__).resolve().parents[3]


def test_the_json_report_is_a_list_of_rows_with_exactly_the_contract_s_fields(
    tmp_path: Path,
) -> None:
    rows = [
        verdict("cancel", True, 0.8, "s", "cancelled"),
        verdict("hang", False, None, "", "no stack"),
        not_run("scaling", "1 GPU"),
    ]
    write_report(tmp_path, rows, "1 × H200", 12.0)
    written = json.loads((tmp_path / "report.json").read_text())
    assert written == [
        {"check": "cancel", "status": "pass", "value": 0.8, "unit": "s", "detail": "cancelled"},
        {"check": "hang", "status": "fail", "value": None, "unit": "", "detail": "no stack"},
        {"check": "scaling", "status": "not_run", "value": None, "unit": "", "detail": "1 GPU"},
    ]
    markdown = (tmp_path / "report.md").read_text()
    assert "1 × H200" in markdown
    assert "3 checks in 12 s: 1 pass, 1 fail, 1 not run." in markdown


def test_a_detail_stays_in_its_table_cell() -> None:
    row = Row("nccl_smoke", "pass", 19.7, "s", "line one | with a pipe\nline two")
    table_row = render_markdown([row], "m", 1).splitlines()[-1]
    assert table_row == "| nccl_smoke | pass | 19.7 s | line one \\| with a pipe<br>line two |"


def test_an_excerpt_is_the_last_matching_lines() -> None:
    lines = [f"NCCL INFO {i}" for i in range(20)] + ["other"]
    assert excerpt(lines, "NCCL INFO", 2) == "NCCL INFO 18\nNCCL INFO 19"
    assert excerpt(["x" * 5000]).startswith("...")


def test_the_kit_takes_every_locked_package_but_what_the_gpu_image_has() -> None:
    lock = (ROOT / "requirements.lock").read_text()
    taken = {kit.canonical(r.split("==")[0]) for r in kit.kit_requirements(lock)}
    locked = {kit.canonical(line.split("==")[0]) for line in lock.splitlines() if "==" in line}
    assert taken == locked - kit.HOST_PROVIDED
    assert {"fastapi", "sqlalchemy", "rq", "redis", "py-spy"} <= taken
    assert "torch" not in locked  # the host's own CUDA build is used
    assert all("==" in r for r in kit.kit_requirements(lock))
