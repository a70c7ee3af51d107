"""A webhook receiver for tests: a small HTTP server on loopback that records every request
and answers with the statuses it is given, then 200."""

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def payload(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.body)
        return value

    @property
    def delivery_id(self) -> str:
        return self.headers["launchbay-delivery"]


@dataclass
class Receiver:
    url: str
    statuses: list[int] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wait_for(self, condition: Callable[[list[Received]], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if condition(list(self.received)):
                    return
            time.sleep(0.05)
        raise AssertionError(f"the receiver got {len(self.received)} requests: {self.received}")


def verify(secret: str, received: Received, tolerance_s: float = 300) -> bool:
    """The check docs/webhooks.md tells receivers to make."""
    fields = dict(part.split("=", 1) for part in received.headers["launchbay-signature"].split(","))
    signed = fields["t"].encode() + b"." + received.body
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    fresh = abs(time.time() - int(fields["t"])) <= tolerance_s
    return fresh and hmac.compare_digest(expected, fields["v1"])


@contextmanager
def webhook_receiver(statuses: list[int] | None = None) -> Iterator[Receiver]:
    """A receiver at http://127.0.0.1:PORT/hook, answering `statuses` in turn, then 200."""
    receiver = Receiver(url="", statuses=list(statuses or []))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items()}
            with receiver.lock:
                receiver.received.append(Received(headers, body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
