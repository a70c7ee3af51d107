"""Server-Sent Events: the parser behind `Client.stream_events`.

It follows the WHATWG rules the server relies on: `field: value` lines, a blank line ends an
event, lines starting with `:` are comments (keep-alive pings), several `data` lines join with
a newline, an event without data is dropped (its `id` still counts), and an event cut off
before its blank line is dropped with its `id`, so a reconnect asks for it again.
"""

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from client.models import Event


@dataclass
class SSEParser:
    """Turns lines into events; `last_event_id` and `retry_ms` follow what the stream said.

    `parse(lines)` for a whole iterable; `feed(line)` one line at a time (the async client).
    """

    last_event_id: str | None = None
    retry_ms: int | None = None
    _event_type: str = field(default="", init=False, repr=False)
    _id_buffer: str | None = field(default=None, init=False, repr=False)
    _data_lines: list[str] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        self.reset()

    def parse(self, lines: Iterable[str]) -> Iterator[Event]:
        self.reset()
        for raw in lines:
            event = self.feed(raw)
            if event is not None:
                yield event

    def feed(self, raw: str) -> Event | None:
        """Take one line; return the event it completes, if any."""
        line = raw.rstrip("\r\n")
        if not line:
            # The id counts only once its event is complete, so a cut-off event is re-sent.
            self.last_event_id = self._id_buffer
            event = None
            if self._data_lines:
                event = Event(
                    id=self._id_buffer,
                    event=self._event_type or "message",
                    data=_decode(self._data_lines),
                )
            self._event_type, self._data_lines = "", []
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data_lines.append(value)
        elif name == "event":
            self._event_type = value
        elif name == "id" and "\0" not in value:
            self._id_buffer = value
        elif name == "retry" and value.isdigit():
            self.retry_ms = int(value)
        return None

    def reset(self) -> None:
        """A new connection: a half-read event of the last one is forgotten."""
        self._event_type = ""
        self._id_buffer = self.last_event_id
        self._data_lines = []


def _decode(data_lines: list[str]) -> Any:
    text = "\n".join(data_lines)
    try:
        return json.loads(text)
    except ValueError:
        return text
