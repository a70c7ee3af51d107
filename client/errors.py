"""What the Launchbay client raises.

Catch `LaunchbayClientError` for everything, or one branch of the tree:

    LaunchbayClientError
     ├── ApiError               the server answered with an error (status, code, message, detail)
     │    ├── InvalidRequest    400, 413, 422: the request was refused as it stands
     │    ├── Unauthorized      401: no token, or a wrong or expired one
     │    ├── Forbidden         403: the token lacks the role for this
     │    ├── NotFound          404
     │    ├── Conflict          409: e.g. deleting a job that still runs, an idempotency key reused
     │    └── ServiceUnavailable  503: the database or Redis does not answer
     ├── ConnectionFailed       no answer at all (refused, reset, timed out), after any retries
     ├── ChecksumMismatch       a downloaded file's sha256 differs from the server's ETag
     ├── PackError              a directory to run cannot be packed (code, message, detail)
     ├── CommandError           a program to run is not one a job can run (code, message)
     └── WaitTimeout            `wait_for_job` ran past its timeout (also a `TimeoutError`)
"""

from typing import Any

import httpx

API_URL_HINT = "is `launchbay api` running? set LAUNCHBAY_API_URL"


class LaunchbayClientError(Exception):
    """The root of everything the client raises."""


class ApiError(LaunchbayClientError):
    """The server answered with a status of 400 or above."""

    def __init__(self, status: int, code: str, message: str, detail: Any = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.detail = detail


class InvalidRequest(ApiError):
    pass


class Unauthorized(ApiError):
    pass


class Forbidden(ApiError):
    pass


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


class ServiceUnavailable(ApiError):
    pass


class ConnectionFailed(LaunchbayClientError):
    """The server could not be reached; `url` is the one tried."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach Launchbay at {url}: {reason} ({API_URL_HINT})")
        self.url = url
        self.reason = reason


class ChecksumMismatch(LaunchbayClientError):
    def __init__(self, path: str, expected: str, actual: str) -> None:
        super().__init__(f"{path}: sha256 is {actual}, the server announced {expected}")
        self.path = path
        self.expected = expected
        self.actual = actual


class PackError(LaunchbayClientError):
    """`run_program`/`upload_directory` refused a directory before uploading it: `code` says
    why (`nothing_to_pack`, `archive_too_large`, `payload_too_large`, `unreadable_file`)."""

    def __init__(self, code: str, message: str, detail: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.detail = detail


class CommandError(LaunchbayClientError):
    """The command given to `run_program` is not one a job can run (`code`:
    `invalid_command`), or names a script that was not packed (`entrypoint_not_packed`)."""

    def __init__(self, message: str, code: str = "invalid_command") -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class WaitTimeout(LaunchbayClientError, TimeoutError):
    def __init__(self, job_id: str, state: str, timeout: float) -> None:
        super().__init__(f"job {job_id} is still {state} after {timeout:g}s")
        self.job_id = job_id
        self.state = state


_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: InvalidRequest,
    422: InvalidRequest,
    503: ServiceUnavailable,
}


def api_error_from_response(response: httpx.Response) -> ApiError:
    """Build the error for a failed response; the body must already be read.

    The contract's body is `{"error": {"code", "message", "detail"}}`; anything else (a proxy's
    HTML page, FastAPI's bare `{"detail": ...}`) still gives a usable code and message.
    """
    status = response.status_code
    code = _snake(response.reason_phrase) or f"http_{status}"
    message = response.reason_phrase or f"HTTP {status}"
    detail: Any = None
    try:
        body = response.json()
    except ValueError:
        text = response.text.strip()
        if text:
            message = text[:300]
    else:
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            code = str(error.get("code") or code)
            message = str(error.get("message") or message)
            detail = error.get("detail")
        elif isinstance(body, dict) and "detail" in body:
            detail = body["detail"]
            if isinstance(detail, str):
                message = detail
        else:
            detail = body
    return _BY_STATUS.get(status, ApiError)(status, code, message, detail)


def _snake(phrase: str) -> str:
    return "_".join(phrase.lower().replace("-", " ").split())
