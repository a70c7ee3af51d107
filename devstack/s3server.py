"""A private S3 protocol server (moto's standalone server) for the tests and benchmarks,
started and stopped like the private Redis: no S3 server binary installs here, and moto
speaks the S3 HTTP API, so Launchbay's own client code talks to it as to any endpoint."""

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from devstack.procs import free_port, start, stop, wait_until

# moto accepts any credentials; these only make every client sign its requests.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "launchbay-test",
    "AWS_SECRET_ACCESS_KEY": "launchbay-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass
class S3Server:
    port: int
    dir: Path
    bucket: str = "launchbay"
    host: str = "127.0.0.1"
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def endpoint(self, host: str | None = None) -> str:
        return f"http://{host or self.host}:{self.port}"

    def store_url(self, prefix: str = "") -> str:
        return f"s3://{self.bucket}/{prefix}".rstrip("/")

    def env(self, prefix: str = "", host: str | None = None) -> dict[str, str]:
        """The settings of a Launchbay process whose artifact store is this server."""
        return {
            "LAUNCHBAY_ARTIFACT_STORE": self.store_url(prefix),
            "LAUNCHBAY_S3_ENDPOINT_URL": self.endpoint(host),
            **CREDENTIALS,
        }

    def start(self) -> None:
        """Start (or start again, empty: moto keeps objects in memory) and make the bucket."""
        argv = [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)]
        self.proc = start(argv, dict(CREDENTIALS), self.dir / "moto.log")
        if not wait_until(self._answers, timeout=30):
            raise RuntimeError(f"moto server did not start: {(self.dir / 'moto.log').read_text()}")
        httpx.put(f"{self.endpoint()}/{self.bucket}", timeout=10).raise_for_status()

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"moto server exited: {(self.dir / 'moto.log').read_text()}")
        try:
            return httpx.get(f"{self.endpoint()}/moto-api/", timeout=1).status_code < 500
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc, timeout=5)
            self.proc = None


@contextmanager
def private_s3(host: str = "127.0.0.1") -> Iterator[S3Server]:
    folder = Path(tempfile.mkdtemp(prefix="launchbay-s3-"))
    server = S3Server(port=free_port(), dir=folder, host=host)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
