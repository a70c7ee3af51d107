"""`Client`'s and `AsyncClient`'s methods for running a directory's program as it is, and for
the files a job kept: `upload_directory`, `run_program`, `get_code`, `get_limits`,
`list_artifacts`, `download_artifacts`; and `list_code`, `delete_code`, `rerun_job`,
`list_runs`.

The rules live in pure modules, shared by both: `client.program` (the command as spec
fields), `client.selection` and `client.packing` (which files, one deterministic archive,
the API's limits), `client.artifact_files` (where a download may go).
"""

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from client import calls
from client.artifact_files import chosen, target_in, written
from client.errors import NotFound
from client.models import (
    Artifact,
    ArtifactPage,
    CodeUpload,
    Job,
    Limits,
    RunPage,
    UploadedCode,
    UploadedDirectory,
)
from client.packing import (
    PackedDirectory,
    pack_directory,
    packed_directory,
    temporary_archive,
)
from client.program import (
    Program,
    RunOptions,
    check_packed,
    entrypoint_in,
    parse_command,
    run_spec,
)
from client.specfile import rerun_spec
from client.transport import AsyncTransport, SyncTransport

PathLike = str | os.PathLike[str]


def _uploaded(packed: PackedDirectory, code: UploadedCode, uploaded: bool) -> UploadedDirectory:
    return UploadedDirectory(
        code_id=code.code_id,
        size=packed.size,
        files=packed.files,
        unpacked_bytes=packed.unpacked_bytes,
        uploaded=uploaded,
        skipped=packed.skipped,
    )


def _options(
    nproc_per_node: int | None, nnodes: int | None, queue: str | None, env: Mapping[str, str] | None
) -> RunOptions:
    return RunOptions(nproc_per_node, nnodes, queue, dict(env or {}))


def _names(dest: Path, listed: list[Artifact], path: str | None) -> list[str]:
    """The artifacts to fetch: the listed ones `path` names, each checked to land in `dest`
    before anything is fetched; else `path` itself, for the API to answer."""
    wanted = [item.path for item in chosen(listed, path)]
    for name in wanted:
        target_in(dest, name)
    return wanted or ([] if path is None else [path])


def _program(command: Sequence[str], directory: PathLike) -> tuple[Path, Program]:
    """The directory to pack, and the command read as a Program whose script lies in it."""
    root = Path(directory).absolute()
    program = parse_command(list(command))
    program.entrypoint = entrypoint_in(root.as_posix(), program.entrypoint)
    return root, program


class RunMethods(SyncTransport):
    """`Client`'s share of this module."""

    def get_code(self, code_id: str) -> UploadedCode:
        """Code you uploaded, by its `code_id` (the sha256 of its bytes); NotFound when you
        have not uploaded it (whoever else did)."""
        return self._call(calls.get_code(code_id))

    def get_limits(self) -> Limits:
        """The most an upload may be, hold and unpack to (the API's settings)."""
        return self._call(calls.get_limits())

    def list_runs(
        self,
        state: str | None = None,
        limit: int = 50,
        offset: int = 0,
        *,
        name: str | None = None,
        tag: str | None = None,
        owner: str | None = None,
        name_contains: str | None = None,
    ) -> RunPage:
        """The jobs `list_jobs` lists, with the same filters, each with its metrics summed up
        (`last`, `min`, `max` and `best`, with `best_mode` saying which extreme is best) in
        one call: a table of runs."""
        filters = {"name": name, "tag": tag, "owner": owner, "name_contains": name_contains}
        return self._call(calls.list_runs(limit, offset, state=state, **filters))

    def list_code(self) -> list[CodeUpload]:
        """Your code uploads, newest first; `in_use` while an unfinished job of yours runs one."""
        return self._call(calls.list_code())

    def delete_code(self, code_id: str) -> None:
        """Take an upload of yours back (Conflict while an unfinished job of yours runs it)."""
        self._call(calls.delete_code(code_id))

    def rerun_job(
        self, job_id: str, overrides: Sequence[str] = (), idempotency_key: str | None = None
    ) -> Job:
        """Submit a job's spec again, with `KEY=VALUE` overrides on dotted paths
        (`["nproc_per_node=2", "config.lr=0.1"]`, values read as YAML), validated by the API
        as any submission. `job_id` may be any job ref (a prefix, a name, `name@N`)."""
        job = self._call(calls.get_job(job_id))
        spec = rerun_spec(job.spec, overrides, started_warm=job.launch_path == "warm")
        return self._call(calls.submit_job(spec, idempotency_key))

    def upload_directory(self, directory: PathLike = ".") -> UploadedDirectory:
        """Pack `directory` (honouring `.gitignore` and `.launchbayignore`; links are not
        followed) into one deterministic `.tar.gz` and upload it, unless you uploaded the same
        bytes before (`uploaded` says which). PackError, before any upload, when nothing is
        left to pack, a file cannot be read, or the archive passes the API's limits (naming
        the biggest files)."""
        with packed_directory(Path(directory), self.get_limits()) as packed:
            return self._upload_packed(packed)

    def _upload_packed(self, packed: PackedDirectory) -> UploadedDirectory:
        try:
            return _uploaded(packed, self.get_code(packed.sha256), False)
        except NotFound:
            pass
        with packed.path.open("rb") as content:
            return _uploaded(packed, self._call(calls.upload_code(packed.name, content)), True)

    def run_program(
        self,
        command: Sequence[str],
        directory: PathLike = ".",
        *,
        spec: Mapping[str, Any] | None = None,
        nproc_per_node: int | None = None,
        nnodes: int | None = None,
        queue: str | None = None,
        env: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
        on_upload: Callable[[UploadedDirectory], None] | None = None,
    ) -> Job:
        """Run a program from `directory` as its author runs it, and return the queued Job:
        `command` is what `launchbay run --` takes (`["python", "train.py", "--epochs", "1"]`,
        `["torchrun", "--nproc-per-node", "2", "train.py"]`...; a relative script is relative
        to `directory`). The directory is uploaded as `upload_directory` does; `spec` gives
        the job's other fields (as a spec file would); the keyword arguments win over both.
        Follow the job with `stream_events` or `wait_for_job`. CommandError for a command a
        job cannot run, or a script that was not packed; `on_upload` is called with the
        upload before the job is submitted."""
        root, program = _program(command, directory)
        with packed_directory(root, self.get_limits()) as packed:
            check_packed(program, packed.files)
            code = self._upload_packed(packed)
        if on_upload is not None:
            on_upload(code)
        options = _options(nproc_per_node, nnodes, queue, env)
        body = run_spec(program, code.code_id, code.files, options, dict(spec or {}), root.name)
        return self._call(calls.submit_job(body, idempotency_key))

    def list_artifacts(self, job_id: str) -> ArtifactPage:
        """The files the job kept (its output directory), sorted by path."""
        return self._call(calls.list_artifacts(job_id))

    def download_artifacts(
        self, job_id: str, path: str | None = None, dest: PathLike = "."
    ) -> list[Path]:
        """Save the job's artifacts (`path`: one file, or those under one directory; None:
        all) as `dest/<path>`, and return where they went. Nothing is written outside `dest`
        (UnsafeArtifactPath), whatever the paths say; a path that is not listed is asked of
        the API as it is (NotFound when it has no such artifact)."""
        base = Path(dest)
        names = _names(base, self.list_artifacts(job_id).items, path)
        saved = []
        for name in names:
            with self._stream(calls.artifact_download(job_id, name)) as answer:
                with written(base, name) as (out, target):
                    for chunk in answer.iter_bytes():
                        out.write(chunk)
            saved.append(target)
        return saved


class AsyncRunMethods(AsyncTransport):
    """`AsyncClient`'s share of this module: the same methods, awaited."""

    async def get_code(self, code_id: str) -> UploadedCode:
        return await self._call(calls.get_code(code_id))

    async def get_limits(self) -> Limits:
        return await self._call(calls.get_limits())

    async def list_runs(
        self,
        state: str | None = None,
        limit: int = 50,
        offset: int = 0,
        *,
        name: str | None = None,
        tag: str | None = None,
        owner: str | None = None,
        name_contains: str | None = None,
    ) -> RunPage:
        filters = {"name": name, "tag": tag, "owner": owner, "name_contains": name_contains}
        return await self._call(calls.list_runs(limit, offset, state=state, **filters))

    async def list_code(self) -> list[CodeUpload]:
        return await self._call(calls.list_code())

    async def delete_code(self, code_id: str) -> None:
        await self._call(calls.delete_code(code_id))

    async def rerun_job(
        self, job_id: str, overrides: Sequence[str] = (), idempotency_key: str | None = None
    ) -> Job:
        job = await self._call(calls.get_job(job_id))
        spec = rerun_spec(job.spec, overrides, started_warm=job.launch_path == "warm")
        return await self._call(calls.submit_job(spec, idempotency_key))

    async def upload_directory(self, directory: PathLike = ".") -> UploadedDirectory:
        return await self._upload(Path(directory), None)

    async def _upload(self, root: Path, program: Program | None) -> UploadedDirectory:
        limits = await self.get_limits()
        with temporary_archive() as archive:
            packed = await asyncio.to_thread(pack_directory, root, limits, archive)
            if program is not None:
                check_packed(program, packed.files)
            try:
                return _uploaded(packed, await self.get_code(packed.sha256), False)
            except NotFound:
                pass
            with packed.path.open("rb") as content:
                code = await self._call(calls.upload_code(packed.name, content))
            return _uploaded(packed, code, True)

    async def run_program(
        self,
        command: Sequence[str],
        directory: PathLike = ".",
        *,
        spec: Mapping[str, Any] | None = None,
        nproc_per_node: int | None = None,
        nnodes: int | None = None,
        queue: str | None = None,
        env: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
        on_upload: Callable[[UploadedDirectory], None] | None = None,
    ) -> Job:
        root, program = _program(command, directory)
        code = await self._upload(root, program)
        if on_upload is not None:
            on_upload(code)
        options = _options(nproc_per_node, nnodes, queue, env)
        body = run_spec(program, code.code_id, code.files, options, dict(spec or {}), root.name)
        return await self._call(calls.submit_job(body, idempotency_key))

    async def list_artifacts(self, job_id: str) -> ArtifactPage:
        return await self._call(calls.list_artifacts(job_id))

    async def download_artifacts(
        self, job_id: str, path: str | None = None, dest: PathLike = "."
    ) -> list[Path]:
        base = Path(dest)
        names = _names(base, (await self.list_artifacts(job_id)).items, path)
        saved = []
        for name in names:
            async with self._stream(calls.artifact_download(job_id, name)) as answer:
                with written(base, name) as (out, target):
                    async for chunk in answer.aiter_bytes():
                        out.write(chunk)
            saved.append(target)
        return saved
