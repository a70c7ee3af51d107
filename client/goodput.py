"""`Client`'s and `AsyncClient`'s goodput methods and records (docs/goodput.md): one job's
ledger (`get_job_goodput`) and many jobs' summed up (`get_goodput`). The parts and their
rules are the API's; the client shows them and computes none."""

from datetime import datetime

from client import calls
from client.goodput_models import Goodput, JobGoodput
from client.transport import AsyncTransport, SyncTransport


class GoodputMethods(SyncTransport):
    """`Client`'s share of this module."""

    def get_job_goodput(self, job_id: str) -> JobGoodput:
        """Where the job's wall time and device time went, part by part."""
        return self._call(calls.get_job_goodput(job_id))

    def get_goodput(
        self,
        owner: str | None = None,
        queue: str | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
    ) -> Goodput:
        """Many jobs' ledgers summed up (default: the last 7 days; a user's own only);
        `since`/`until`: ISO 8601 or a duration ago (`7d`, `12h`)."""
        return self._call(calls.get_goodput(owner, queue, since, until))


class AsyncGoodputMethods(AsyncTransport):
    """`AsyncClient`'s share of this module: the same methods, awaited."""

    async def get_job_goodput(self, job_id: str) -> JobGoodput:
        return await self._call(calls.get_job_goodput(job_id))

    async def get_goodput(
        self,
        owner: str | None = None,
        queue: str | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
    ) -> Goodput:
        return await self._call(calls.get_goodput(owner, queue, since, until))
