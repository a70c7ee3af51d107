"""A cap on request body size, enforced before a route reads the body."""

from collections.abc import Callable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import error_response

TOO_LARGE = "the request body is larger than {limit} bytes"


class BodySizeLimit:
    """Answers 413 when a body is larger than the limit for its path.

    A declared Content-Length over the limit is refused at once; a streamed body is counted
    as it arrives (the HTTPException raised there reaches the error handlers as a 413).
    """

    def __init__(self, app: ASGIApp, limit_for_path: Callable[[str], int]) -> None:
        self.app = app
        self.limit_for_path = limit_for_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for_path(scope["path"])
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            response = error_response(413, "payload_too_large", TOO_LARGE.format(limit=limit))
            await response(scope, receive, send)
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise HTTPException(413, TOO_LARGE.format(limit=limit))
            return message

        await self.app(scope, counting_receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
