"""P5: checkpoint download MB/s over HTTP ÷ `cat FILE > /dev/null` of the same file.

A job (the `python` launcher, uploaded code) writes a 256 MiB checkpoint file into its
checkpoint directory the way the contract says (temporary name, fsync, rename, then the events
line), so the worker registers it. Then `curl` (streaming to /dev/null) and `cat` read it in
turns; the first of each is dropped so both read from a warm page cache. Both are timed the
same way: wall clock around the process.

A second baseline shows what any HTTP server could do over this loopback: the same curl
against a bare socket that answers with a header and one `sendfile()` of the file.
"""

import socket
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType

from bench.common import Result, median, running_stack, upload_code, wait_for_end

SIZE_MIB = 256

WRITER_SOURCE = '''\
"""Launchbay bench P5: write a SIZE MiB checkpoint file and report it."""
import json
import os
import sys

size_mib = int(sys.argv[1])
directory = os.environ["LAUNCHBAY_CHECKPOINT_DIR"]
os.makedirs(directory, exist_ok=True)
block = os.urandom(1 << 20)
temp, final = os.path.join(directory, ".big.tmp"), os.path.join(directory, "big.bin")
with open(temp, "wb") as out:
    for _ in range(size_mib):
        out.write(block)
    out.flush()
    os.fsync(out.fileno())
os.replace(temp, final)
line = {"type": "checkpoint", "path": "big.bin", "step": 1, "epoch": 1}
with open(os.environ["LAUNCHBAY_EVENTS_FILE"], "ab") as events:
    events.write((json.dumps(line) + "\\n").encode())
'''


class SendfileServer:
    """The least an HTTP server can do: per connection, read the request, write a header,
    `sendfile()` the whole file, close. On 127.0.0.1, in a thread of this process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = path.stat().st_size
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/"

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            with conn, open(self.path, "rb") as file:
                conn.settimeout(30)
                request = b""
                while b"\r\n\r\n" not in request:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    request += chunk
                header = f"HTTP/1.1 200 OK\r\nContent-Length: {self.size}\r\n"
                conn.sendall(f"{header}Connection: close\r\n\r\n".encode())
                conn.sendfile(file)

    def __enter__(self) -> "SendfileServer":
        self.thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stopping.set()
        self.thread.join(timeout=30)
        self.listener.close()


def curl_argv(url: str, *headers: str) -> list[str]:
    argv = ["curl", "--silent", "--show-error", "--fail", "--output", "/dev/null"]
    for header in headers:
        argv += ["--header", header]
    return [*argv, "--write-out", "%{size_download}", url]


def timed(argv: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=120)
    return time.perf_counter() - start, done.stdout


# long: one job's checkpoint read by HTTP, a bare socket and cat in alternation on one
# stack, then the two rows read from those times
def run(rounds: int = 3) -> list[Result]:
    http_s: list[float] = []
    raw_s: list[float] = []
    cat_s: list[float] = []
    with running_stack() as stack, stack.client() as http:
        code_id = upload_code(http, "writer.py", WRITER_SOURCE)
        response = http.post(
            "/v1/jobs",
            json={
                "name": "p5",
                "code": {"code_id": code_id, "entrypoint": "writer.py"},
                "args": [str(SIZE_MIB)],
                "launcher": "python",
                "nproc_per_node": 1,
            },
        )
        response.raise_for_status()
        job_id = response.json()["id"]
        wait_for_end(http, stack, job_id, timeout=120)
        checkpoints = http.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
        if not checkpoints:
            raise RuntimeError(f"P5: the checkpoint was not registered:\n{stack.worker_logs()}")
        checkpoint = checkpoints[-1]
        path = stack.data_dir / checkpoint["path"]
        size = checkpoint["size"]
        if path.stat().st_size != size or size < 200 * 1024 * 1024:
            raise RuntimeError(f"P5: {path} is not the {size}-byte file registered")
        curl = curl_argv(
            f"{stack.url}/v1/jobs/{job_id}/checkpoints/{checkpoint['id']}/download",
            f"Authorization: Bearer {stack.admin_token}",
        )
        cat = ["sh", "-c", 'cat "$1" > /dev/null', "cat", str(Path(path))]
        with SendfileServer(path) as bare:
            for _ in range(rounds):
                for argv, times in ((curl, http_s), (curl_argv(bare.url), raw_s)):
                    seconds, downloaded = timed(argv)
                    if int(downloaded) != size:
                        raise RuntimeError(f"P5: curl got {downloaded} of {size} bytes")
                    times.append(seconds)
                cat_s.append(timed(cat)[0])
        http.delete(f"/v1/jobs/{job_id}").raise_for_status()  # and its 256 MiB file
    mb = size / 1e6
    http_rate = mb / median(http_s[1:])
    raw_rate = mb / median(raw_s[1:])
    cat_rate = mb / median(cat_s[1:])
    ratio = http_rate / cat_rate
    return [
        Result(
            "P5",
            f"checkpoint download MB/s over HTTP (curl → /dev/null) ÷ cat → /dev/null, "
            f"{SIZE_MIB} MiB file",
            f"{ratio:.2f} ({http_rate:,.0f} vs {cat_rate:,.0f} MB/s; HTTP "
            f"{', '.join(f'{s:.2f}' for s in http_s)} s, cat "
            f"{', '.join(f'{s:.3f}' for s in cat_s)} s; first of each dropped)",
            "≥ 0.8",
            ratio >= 0.8,
            f"{rounds} alternating reads each, page cache warm; 1 uvicorn process",
        ),
        Result(
            "P5′",
            "the same download ÷ curl from a bare socket that sendfile()s the file "
            "(what loopback TCP + curl allow)",
            f"{http_rate / raw_rate:.2f} ({http_rate:,.0f} vs {raw_rate:,.0f} MB/s; bare "
            f"{', '.join(f'{s:.2f}' for s in raw_s)} s; sendfile ÷ cat = "
            f"{raw_rate / cat_rate:.2f})",
            "report",
            None,
            "same curl, same file, alternating with the above",
        ),
    ]
