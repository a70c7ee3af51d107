"""The API's refusals as the CLI prints them: one line per validation error (with the API's
did-you-mean), the candidates of an ambiguous job ref. The API decides both; this only lays
them out."""

from typing import Any

from client.errors import ApiError


def describe_api_error(exc: ApiError) -> str:
    """`error <code>: <message>`, and the detail a person needs, one item per line."""
    head = f"error {exc.code}: "
    if exc.code == "validation_error" and _located(exc.detail):
        problems = [_problem(item) for item in exc.detail]
        if len(problems) == 1:
            return head + f"invalid request: {problems[0]}"
        return head + "invalid request:\n" + "\n".join(f"  {p}" for p in problems)
    if exc.code == "ambiguous_id" and isinstance(exc.detail, dict):
        candidates = exc.detail.get("candidates") or []
        lines = [head + exc.message]
        lines += [f"  {_candidate(c)}" for c in candidates if isinstance(c, dict)]
        return "\n".join(lines)
    return head + exc.message


def _located(detail: Any) -> bool:
    return (
        isinstance(detail, list)
        and bool(detail)
        and all(isinstance(item, dict) and "loc" in item for item in detail)
    )


def _problem(item: dict[str, Any]) -> str:
    """`checkpoint.every_step: unknown field (did you mean every_steps?)`."""
    loc = [str(part) for part in item.get("loc") or []]
    if loc and loc[0] == "body":
        loc = loc[1:]
    msg = str(item.get("msg", "")).removeprefix("Value error, ")
    if item.get("type") == "extra_forbidden":
        msg = "unknown field"
    if item.get("did_you_mean"):
        msg += f" (did you mean {item['did_you_mean']}?)"
    return f"{'.'.join(loc)}: {msg}" if loc else msg


def _candidate(job: dict[str, Any]) -> str:
    created = str(job.get("created_at") or "")[:19].replace("T", " ")
    return f"{job.get('id', '')}  {job.get('state', '')}  {created}  {job.get('name', '')}"
