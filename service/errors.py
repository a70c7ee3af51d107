"""One exception tree, mapped by one set of handlers to the error body the README
describes ("Errors"):

    LaunchbayError                 (500 internal_error)
    ├── BadRequest                 (400 bad_request)
    ├── Unauthorized               (401 unauthorized)
    ├── Forbidden                  (403 forbidden)
    ├── NotFound                   (404 not_found)
    ├── Conflict                   (409 conflict)
    │   └── InvalidTransition      (409 invalid_transition)
    │   (a job ref naming several jobs: 409 ambiguous_id, service.job_refs)
    ├── PayloadTooLarge            (413 payload_too_large)
    ├── Unprocessable              (422 validation_error)
    ├── TooManyRequests            (429 rate_limited)
    └── ServiceUnavailable         (503 unavailable)

Body: {"error": {"code": "<snake_case>", "message": "<for a person>", "detail": <any>}}.
"""

import difflib
import logging
import typing
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
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


def _validation_detail(exc: RequestValidationError, body: Any = None) -> list[dict[str, Any]]:
    """Each error as `{"loc", "msg", "type"}`, and for an unknown field the known one it is
    closest to, `did_you_mean` (difflib), when the request's body model has one."""
    detail = []
    for err in exc.errors():
        item: dict[str, Any] = {
            "loc": list(err.get("loc", ())),
            "msg": str(err.get("msg", "")),
            "type": str(err.get("type", "")),
        }
        if item["type"] == "extra_forbidden" and item["loc"]:
            known = known_fields(body, item["loc"][1:-1])
            close = difflib.get_close_matches(str(item["loc"][-1]), known, n=1, cutoff=0.6)
            if close:
                item["did_you_mean"] = close[0]
        detail.append(item)
    return detail


def known_fields(model: Any, path: list[Any]) -> list[str]:
    """The field names of the model found at `path` (keys and list indexes) inside `model`:
    `JobSpec` and `["checkpoint"]` give the checkpoint policy's fields; [] when none."""
    for key in path:
        fields = getattr(_model_in(model), "model_fields", None)
        if isinstance(key, int):
            model = _item_of(model)
        elif fields and key in fields:
            model = fields[key].annotation
        else:
            return []
    fields = getattr(_model_in(model), "model_fields", None)
    return list(fields or ())


def _item_of(annotation: Any) -> Any:
    """The items' annotation of a list annotation (`list[X]`, `list[X] | None`), or None."""
    annotation = _unwrapped(annotation)
    if typing.get_origin(annotation) is list:
        return next(iter(typing.get_args(annotation)), None)
    for arg in typing.get_args(annotation):
        if typing.get_origin(_unwrapped(arg)) is list:
            return _item_of(arg)
    return None


def _unwrapped(annotation: Any) -> Any:
    """`Annotated[X, ...]` as X."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _model_in(annotation: Any) -> Any:
    """The pydantic model an annotation holds (`X | None`, `Annotated[X, ...]`), or None."""
    annotation = _unwrapped(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (list, dict):
        return None  # its items' model is one step further (an index, a key)
    for arg in typing.get_args(annotation):
        if (found := _model_in(arg)) is not None:
            return found
    return None


def _body_model(request: Request) -> Any:
    """The model of the route's JSON body (`JobSpec` for `POST /v1/jobs`), or None."""
    field = getattr(request.scope.get("route"), "body_field", None)
    return getattr(getattr(field, "field_info", None), "annotation", None)


async def _on_launchbay_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, LaunchbayError)
    return error_response(exc.status, exc.code, exc.message, exc.detail, exc.headers)


async def _on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    """422 `validation_error`; the message has one line per error (the first five):
    `invalid request: nproc_per_nodes: unknown field (did you mean nproc_per_node?)`."""
    assert isinstance(exc, RequestValidationError)
    detail = _validation_detail(exc, _body_model(request))
    if any(err["type"] == "json_invalid" for err in detail):
        return error_response(400, "invalid_json", "the request body is not valid JSON", detail)
    problems = [_describe(err) for err in detail[:5]]
    if len(detail) > 5:
        problems.append(f"(and {len(detail) - 5} more)")
    if len(problems) == 1:
        message = f"invalid request: {problems[0]}"
    else:
        message = f"invalid request ({len(detail)} problems):\n" + "\n".join(
            f"  {problem}" for problem in problems
        )
    return error_response(422, "validation_error", message, detail)


def _describe(err: dict[str, Any]) -> str:
    """`config.lr: Input should be greater than 0`, without FastAPI's `body.` prefix; an
    unknown field says so, with the known field it is closest to."""
    loc = [str(p) for p in err["loc"]]
    if loc and loc[0] == "body":
        loc = loc[1:]
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
        if "did_you_mean" in err:
            msg += f" (did you mean {err['did_you_mean']}?)"
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
