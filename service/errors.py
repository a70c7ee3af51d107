"""One exception tree, mapped by one set of handlers to the error body the README
describes ("Errors"):

    LaunchbayError                 (500 internal_error)
    ├── BadRequest                 (400 bad_request)
    ├── Unauthorized               (401 unauthorized)
    ├── Forbidden                  (403 forbidden)
    ├── NotFound                   (404 not_found)
    ├── Conflict                   (409 conflict)
    │   └── InvalidTransition      (409 invalid_transition)
    ├── PayloadTooLarge            (413 payload_too_large)
    ├── Unprocessable              (422 validation_error)
    ├── TooManyRequests            (429 rate_limited)
    └── ServiceUnavailable         (503 unavailable)

Body: {"error": {"code": "<snake_case>", "message": "<for a person>", "detail": <any>}}.
"""

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path

log = logging.getLogger("launchbay.api")
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class LaunchbayError(Exception):
    status = 500
    code = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        detail: Any = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.headers = headers
        if code is not None:
            self.code = code


class BadRequest(LaunchbayError):
    status, code = 400, "bad_request"


class Unauthorized(LaunchbayError):
    status, code = 401, "unauthorized"


class Forbidden(LaunchbayError):
    status, code = 403, "forbidden"


class NotFound(LaunchbayError):
    status, code = 404, "not_found"


class Conflict(LaunchbayError):
    status, code = 409, "conflict"


class InvalidTransition(Conflict):
    code = "invalid_transition"


class PayloadTooLarge(LaunchbayError):
    status, code = 413, "payload_too_large"


class Unprocessable(LaunchbayError):
    status, code = 422, "validation_error"


class TooManyRequests(LaunchbayError):
    status, code = 429, "rate_limited"


class ServiceUnavailable(LaunchbayError):
    status, code = 503, "unavailable"


_CODES_BY_STATUS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    416: "range_not_satisfiable",
    422: "validation_error",
    429: "rate_limited",
    503: "unavailable",
}


def error_body(code: str, message: str, detail: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "detail": detail}}


def error_response(
    status: int,
    code: str,
    message: str,
    detail: Any = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(code, message, detail), status_code=status, headers=headers)


def _validation_detail(exc: RequestValidationError) -> list[dict[str, Any]]:
    return [
        {
            "loc": list(err.get("loc", ())),
            "msg": str(err.get("msg", "")),
            "type": str(err.get("type", "")),
        }
        for err in exc.errors()
    ]


async def _on_launchbay_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, LaunchbayError)
    return error_response(exc.status, exc.code, exc.message, exc.detail, exc.headers)


async def _on_validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    detail = _validation_detail(exc)
    if any(err["type"] == "json_invalid" for err in detail):
        return error_response(400, "invalid_json", "the request body is not valid JSON", detail)
    problems = "; ".join(_describe(err) for err in detail[:5])
    more = f" (and {len(detail) - 5} more)" if len(detail) > 5 else ""
    return error_response(422, "validation_error", f"invalid request: {problems}{more}", detail)


def _describe(err: dict[str, Any]) -> str:
    """`config.lr: Input should be greater than 0`, without FastAPI's `body.` prefix."""
    loc = [str(p) for p in err["loc"]]
    if loc and loc[0] == "body":
        loc = loc[1:]
    msg = str(err["msg"]).removeprefix("Value error, ")
    return f"{'.'.join(loc)}: {msg}" if loc else msg


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _CODES_BY_STATUS.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        # Starlette names the methods of the first route that matched the path only; a path
        # served by several routes (GET and DELETE /v1/jobs/{id}) allows all of theirs.
        headers["Allow"] = ", ".join(allowed_methods(request))
    return error_response(exc.status_code, code, message, None, headers)


def allowed_methods(request: Request) -> list[str]:
    """Every method the app answers at this request's path: the documented operations of
    each path template that matches (FastAPI nests its routers, so their routes are not
    listed flat), and the app's own undocumented routes."""
    path = request.scope.get("path", "")
    methods: set[str] = set()
    for template, item in request.app.openapi().get("paths", {}).items():
        if compile_path(template)[0].match(path):
            methods |= {m.upper() for m in item if m.upper() in HTTP_METHODS}
    for route in request.app.routes:
        route_regex = getattr(route, "path_regex", None)
        if route_regex is not None and route_regex.match(path):
            methods |= getattr(route, "methods", None) or set()
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


async def _on_unexpected_error(_request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=exc)
    return error_response(500, "internal_error", "an unexpected error occurred")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(LaunchbayError, _on_launchbay_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(Exception, _on_unexpected_error)
