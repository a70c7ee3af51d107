"""The container stack, validated offline as scripts/check-stack.sh does for CI: the stock
docker-compose.yml, its multi-node profile (host network, InfiniBand, the socket interfaces,
this host's and the head's addresses) and the Dockerfile."""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

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
    assert "check-stack: the README's compose lines ok" in done.stdout


def test_compose_lines_that_leave_a_secret_unset_fail_the_check(tmp_path: Path) -> None:
    """The README's lines run in a fresh shell: without the export, `up` would stop."""
    readme = (ROOT / "README.md").read_text()
    assert "\nexport REDIS_PASSWORD=" in readme
    broken = tmp_path / "README.md"
    broken.write_text(readme.replace("\nexport REDIS_PASSWORD=", "\nREDIS_PASS="))
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "check-stack.sh"), "readme", str(broken)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 1, done
    assert "export REDIS_PASSWORD first" in done.stderr
    assert f"{broken}: its compose lines do not work as written" in done.stderr


def test_workers_can_compile_torch_extensions_once() -> None:
    """DeepSpeed compiles its ops with g++ and ninja on first use: the image has both, and
    the compiled ops (TORCH_EXTENSIONS_DIR) live on a volume every worker container keeps."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    install = next(line for line in dockerfile.splitlines() if "apt-get install" in line)
    assert "g++" in install.split() and "ninja-build" in install.split()
    assert "TORCH_EXTENSIONS_DIR=/cache/torch_extensions" in dockerfile
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert "worker-cache" in compose["volumes"]
    assert "worker-cache:/cache" in compose["services"]["worker"]["volumes"]
