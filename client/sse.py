"""Server-Sent Events: the parser behind `Client.events`.

It follows the WHATWG rules the server relies on: `field: value` lines, a blank line ends an
event, lines starting with `:` are comments (keep-alive pings), several `data` lines join with
a newline, an event without data is dropped (its `id` still counts), and an event cut off
before its blank line is dropped with its `id`, so a reconnect asks for it again.
"""

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})


@dataclass(frozen=True)
class Event:
    """One event of a job's stream; `data` is the decoded JSON (the raw text if it is not JSON)."""

    id: str | None
    event: str
    data: Any

    @property
    def is_terminal(self) -> bool:
        """True for the `state` event that ends a job (`succeeded`, `failed`, `cancelled`)."""
        return (
            self.event == "state"
            and isinstance(self.data, dict)
            and self.data.get("state") in TERMINAL_STATES
        )


@dataclass
class SSEParser:
    """Turns lines into events; `last_event_id` and `retry_ms` follow what the stream said."""

    last_event_id: str | None = None
    retry_ms: int | None = None

    def parse(self, lines: Iterable[str]) -> Iterator[Event]:
        event_type, id_buffer = "", self.last_event_id
        data_lines: list[str] = []
        for raw in lines:
            line = raw.rstrip("\r\n")
            if not line:
                # The id counts only once its event is complete, so a cut-off event is re-sent.
                self.last_event_id = id_buffer
                if data_lines:
                    yield Event(id_buffer, event_type or "message", _decode(data_lines))
                event_type, data_lines = "", []
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                data_lines.append(value)
            elif name == "event":
                event_type = value
            elif name == "id" and "\0" not in value:
                id_buffer = value
            elif name == "retry" and value.isdigit():
                self.retry_ms = int(value)


def _decode(data_lines: list[str]) -> Any:
    text = "\n".join(data_lines)
    try:
        return json.loads(text)
    except ValueError:
        return text
