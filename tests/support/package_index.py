"""A private package index for tests: a simple index (PEP 503) on loopback serving the wheels
of a wheelhouse to whoever gives its user and password (HTTP basic), and calling `on_request`
with each request's path while it is answered, when the installer that sent it still runs."""

import base64
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name, parse_wheel_filename


@dataclass
class PackageIndex:
    url: str  # with the user and password in it, as an operator's setting would be
    authorized: list[str] = field(default_factory=list)  # the paths asked with the password
    refused: list[str] = field(default_factory=list)


@contextmanager
def package_index(
    wheelhouse: Path, user: str, password: str, on_request: Callable[[str], None] = lambda _: None
) -> Iterator[PackageIndex]:
    """`http://user:password@127.0.0.1:PORT/simple`, serving the wheels in `wheelhouse`."""
    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    index = PackageIndex(url="")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            on_request(self.path)
            if self.headers.get("Authorization") != expected:
                with lock:
                    index.refused.append(self.path)
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="packages"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            with lock:
                index.authorized.append(self.path)
            body = self._body()
            self.send_response(200 if body is not None else 404)
            page = self.path.startswith("/simple/")
            self.send_header("Content-Type", "text/html" if page else "application/octet-stream")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def do_HEAD(self) -> None:  # no range requests: the installer then reads whole wheels
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _body(self) -> bytes | None:
            parts = [p for p in self.path.split("?")[0].split("/") if p]
            if len(parts) == 2 and parts[0] == "simple":
                wheels = [
                    w.name
                    for w in sorted(wheelhouse.glob("*.whl"))
                    if canonicalize_name(parse_wheel_filename(w.name)[0]) == parts[1]
                ]
                links = "".join(f'<a href="/files/{name}">{name}</a>\n' for name in wheels)
                return f"<html><body>\n{links}</body></html>\n".encode() if wheels else None
            if len(parts) == 2 and parts[0] == "files" and (wheelhouse / parts[1]).is_file():
                return (wheelhouse / parts[1]).read_bytes()
            return None

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    index.url = f"http://{user}:{password}@127.0.0.1:{server.server_address[1]}/simple"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield index
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
