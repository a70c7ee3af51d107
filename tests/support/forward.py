"""A TCP port forwarder in a thread: `forwarded(listen_host, target)` makes a service that
listens on loopback (the machine's PostgreSQL) reachable on another address of the host, such
as its address on the bridge of tests/support/netns.py."""

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.procs import wait_until


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@contextmanager
def forwarded(listen_host: str, target: tuple[str, int]) -> Iterator[int]:
    """Forward connections to `listen_host`:<the port yielded> to `target` until the end."""
    server = socket.create_server((listen_host, 0))
    server.settimeout(0.2)
    port = int(server.getsockname()[1])
    stopping = threading.Event()
    open_sockets: list[socket.socket] = []

    def accept() -> None:
        while not stopping.is_set():
            try:
                client, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            open_sockets.extend((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    thread = threading.Thread(target=accept, name="forwarder", daemon=True)
    thread.start()
    try:
        yield port
    finally:
        stopping.set()
        thread.join(5)
        server.close()
        for sock in open_sockets:
            sock.close()
        wait_until(lambda: not thread.is_alive(), timeout=5)
