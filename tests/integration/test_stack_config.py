"""The container stack, validated offline as scripts/check-stack.sh does for CI: the stock
docker-compose.yml, its multi-node profile (host network, InfiniBand, the socket interfaces,
this host's and the head's addresses) and the Dockerfile."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    shutil.which("docker-compose") is None, reason="docker-compose is not installed"
)


def test_the_stack_and_its_multi_node_profile_validate() -> None:
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "check-stack.sh")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "check-stack: docker-compose.yml profile multi-node ok" in done.stdout
