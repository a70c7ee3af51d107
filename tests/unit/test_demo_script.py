"""What `scripts/demo.sh` (the README's first command) says at its end, read from the script:
its full run is tests/e2e/test_demo.py."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEMO = (ROOT / "scripts" / "demo.sh").read_text()


def test_a_second_demo_run_keeps_the_first_checkpoint_and_says_where_it_saved() -> None:
    download = [line for line in DEMO.splitlines() if " download " in line]
    assert len(download) == 1 and "--no-clobber" in download[0]
    assert "-o digits-best.pt" in download[0]
    # The path the download saved to (its own last line) is the one the demo names.
    assert 'echo "$saved"' in DEMO
    assert re.search(r'echo "demo: the best checkpoint is \./\$best[;"]', DEMO)


def test_the_demo_points_to_the_section_that_says_how_to_load_the_checkpoint() -> None:
    pointers = re.findall(r"(docs/[\w.-]+\.md)#([\w-]+)", DEMO)
    assert pointers, "the demo's last line names where loading the checkpoint is explained"
    for page, anchor in pointers:
        headings = re.findall(r"^#+ (.+)$", (ROOT / page).read_text(), re.MULTILINE)
        anchors = {re.sub(r"[^\w -]", "", h).strip().lower().replace(" ", "-") for h in headings}
        assert anchor in anchors, (page, anchor)
    assert "README:" not in DEMO
