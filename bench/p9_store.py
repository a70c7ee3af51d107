"""P9: checkpoints in an S3 store (moto's S3 server on this machine).

- P9a, the client library: obstore and boto3 side by side against the same server: a fresh
  interpreter's import + client + first put, and put / get MB/s of the same file.
- P9b, upload: MB/s of the worker's upload path (`worker.checkpoint_upload.store_file`: the
  file streamed in parts through `S3Store.put`, hashing as it goes) ÷ obstore's own
  `put(store, key, Path)` of the same file. Goal ≥ 0.9.
- P9c, the training step stall: a rank (a torch process doing fixed CPU steps) pinned to one
  core, the worker's upload thread and the S3 server on the other, as a GPU host's ranks
  and its worker do not share cores: mean step time while the worker uploads ÷ while it does
  not, the median of 30 busy windows (each ÷ the idle windows either side). Goal ≤ 1.02,
  with the bound on the worker's reads while ranks run (`checkpoint_upload_bytes_per_s`, at
  its default). The S3 server (moto, a Python process) stands in for a store on another
  machine: it runs in SCHED_IDLE at nice 19, so that its CPU is not counted as the upload's;
  a real deployment's store spends none of the training host's. P9c′ is the worker's part
  alone (read, hash, write to a local sink). Beside them, two rows to read them by: the
  worker's part with no bound (P9c-full) and windows with no upload at all (P9c-none, the
  noise floor). The four ways' windows cycle in one rank's run, so each sees the same
  machine.
- P9d, download: MB/s of `GET …/checkpoints/{id}/download` through `launchbay api` streaming
  from the store ÷ a direct GET of the same object from the store (a presigned URL), the
  same HTTP client for both, rounds alternating. Goal ≥ 0.8.
"""

import hashlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import Result, environ_set, median, running_stack
from bench.p9_store_stall import step_stalls
from devstack.s3server import S3Server, private_s3

SIZE_MIB = 64
ROUNDS = 3

FIRST_CALL = {
    "obstore": (
        "import obstore\n"
        "from obstore.store import S3Store\n"
        "s = S3Store('launchbay', endpoint='{ep}', client_options={{'allow_http': True}})\n"
        "obstore.put(s, 'first-call', b'x')\n"
    ),
    "boto3": (
        "import boto3\n"
        "c = boto3.client('s3', endpoint_url='{ep}')\n"
        "c.put_object(Bucket='launchbay', Key='first-call', Body=b'x')\n"
    ),
}


def _mbps(seconds: float) -> float:
    return SIZE_MIB * 1.048576 / seconds


def _timed(action: Any) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def library_comparison(s3: S3Server, file: Path) -> Result:
    import boto3
    import obstore
    from obstore.store import S3Store

    first: dict[str, list[float]] = {"obstore": [], "boto3": []}
    for _ in range(ROUNDS):
        for name, source in FIRST_CALL.items():
            code = source.format(ep=s3.endpoint())
            first[name].append(
                _timed(lambda c=code: subprocess.run([sys.executable, "-c", c], check=True))
            )
    ob = S3Store("launchbay", endpoint=s3.endpoint(), client_options={"allow_http": True})
    bo = boto3.client("s3", endpoint_url=s3.endpoint())
    put: dict[str, list[float]] = {"obstore": [], "boto3": []}
    get: dict[str, list[float]] = {"obstore": [], "boto3": []}
    for _ in range(ROUNDS):
        put["obstore"].append(_timed(lambda: obstore.put(ob, "lib/ob", file)))
        put["boto3"].append(_timed(lambda: bo.upload_file(str(file), "launchbay", "lib/bo")))
        get["obstore"].append(
            _timed(lambda: sum(len(c) for c in obstore.get(ob, "lib/ob").stream()))
        )
        get["boto3"].append(
            _timed(
                lambda: sum(
                    len(c)
                    for c in bo.get_object(Bucket="launchbay", Key="lib/bo")["Body"].iter_chunks(
                        1 << 20
                    )
                )
            )
        )
    measured = (
        f"import+client+first put {median(first['obstore']):.2f} s vs "
        f"{median(first['boto3']):.2f} s; put {_mbps(median(put['obstore'])):.0f} vs "
        f"{_mbps(median(put['boto3'])):.0f} MB/s; get {_mbps(median(get['obstore'])):.0f} vs "
        f"{_mbps(median(get['boto3'])):.0f} MB/s (obstore vs boto3)"
    )
    return Result(
        "P9a",
        "S3 client: obstore vs boto3 (moto server)",
        measured,
        "measure, then choose",
        None,
        f"{SIZE_MIB} MiB file, median of {ROUNDS}",
    )


def upload_ratio(s3: S3Server, file: Path) -> Result:
    import obstore

    from service.artifacts.s3 import S3Store
    from worker.checkpoint_upload import store_file

    store = S3Store.from_url(s3.store_url("bench"), endpoint_url=s3.endpoint())
    ours: list[float] = []
    theirs: list[float] = []
    size = file.stat().st_size
    for i in range(ROUNDS):
        ours.append(_timed(lambda i=i: store_file(store, f"ours/{i}", file, size)))
        theirs.append(_timed(lambda i=i: obstore.put(store.client, f"theirs/{i}", file)))
    ratio = median(theirs) / median(ours)
    return Result(
        "P9b",
        "checkpoint upload MB/s (worker path, sha256 while streaming) ÷ obstore's own put",
        f"{ratio:.2f} ({_mbps(median(ours)):.0f} vs {_mbps(median(theirs)):.0f} MB/s)",
        "≥ 0.9",
        ratio >= 0.9,
        f"{SIZE_MIB} MiB, median of {ROUNDS}, alternating",
    )


def _register(stack_root: Path, database_url: str, store: Any, file: Path) -> tuple[str, str]:
    """A running job with `file` registered as its checkpoint through the worker's registrar."""
    from sqlmodel import Session

    from jobs.contract.checkpoints import CheckpointPolicy
    from jobs.contract.data_dir import DataLayout
    from jobs.spec import JobSpec
    from jobs.states import AttemptRef, JobState
    from service import records as registry
    from service.db import make_engine
    from worker.checkpoints import CheckpointRegistrar
    from worker.events import CheckpointEvent

    engine = make_engine(database_url)
    data_dir = stack_root / "data"
    with Session(engine, expire_on_commit=False) as session:
        job = registry.create_job(session, JobSpec(name="bench-p9", recipe="synthetic"))
        registry.transition_job(session, job.id, JobState.STARTING, attempt=1)
        registry.transition_job(session, job.id, JobState.RUNNING, attempt=1)
    folder = DataLayout(data_dir).kept_checkpoints(job.id)
    folder.mkdir(parents=True)
    os.link(file, folder / "big.bin")
    registrar = CheckpointRegistrar(
        engine,
        AttemptRef(job.id, 1),
        data_dir=data_dir,
        checkpoint_dir=folder,
        policy=CheckpointPolicy(),
        store=store,
    )
    registrar.add(CheckpointEvent(path="big.bin", step=1, epoch=0))
    registrar.poll(final=True)
    registrar.poll(final=True)
    with Session(engine) as session:
        [row] = registry.list_checkpoints(session, job.id)
    engine.dispose()
    return job.id, row.id


def api_download_ratio(s3: S3Server, file: Path) -> Result:
    from service.artifacts.s3 import S3Store

    env = s3.env(prefix="api")
    store = S3Store.from_url(env["LAUNCHBAY_ARTIFACT_STORE"], endpoint_url=s3.endpoint())
    with running_stack(workers=0, **env) as stack:
        job_id, checkpoint_id = _register(stack.root, stack.database_url, store, file)
        key = f"checkpoints/{job_id}/big.bin"
        direct_url = store.presign_get(key, 600)
        assert direct_url is not None
        via_api = f"{stack.url}/v1/jobs/{job_id}/checkpoints/{checkpoint_id}/download"
        expected = hashlib.sha256(file.read_bytes()).hexdigest()
        api_s: list[float] = []
        direct_s: list[float] = []
        with httpx.Client(timeout=120) as http:
            auth = {"Authorization": f"Bearer {stack.admin_token}"}

            def fetch(url: str, headers: dict[str, str]) -> None:
                digest = hashlib.sha256()
                with http.stream("GET", url, headers=headers) as response:
                    response.raise_for_status()
                    for chunk in response.iter_bytes(1 << 20):
                        digest.update(chunk)
                assert digest.hexdigest() == expected

            fetch(via_api, auth)  # warm both paths once
            fetch(direct_url, {})
            for _ in range(ROUNDS):
                api_s.append(_timed(lambda: fetch(via_api, auth)))
                direct_s.append(_timed(lambda: fetch(direct_url, {})))
    ratio = median(direct_s) / median(api_s)
    return Result(
        "P9d",
        "checkpoint download MB/s through the API from the store ÷ a direct GET from the store",
        f"{ratio:.2f} ({_mbps(median(api_s)):.0f} vs {_mbps(median(direct_s)):.0f} MB/s)",
        "≥ 0.8",
        ratio >= 0.8,
        f"{SIZE_MIB} MiB, sha256 checked on both, median of {ROUNDS}, alternating",
    )


def run(long: bool = False) -> list[Result]:
    workdir = Path(tempfile.mkdtemp(prefix="launchbay-bench-p9-"))
    file = workdir / "checkpoint.bin"
    file.write_bytes(os.urandom(SIZE_MIB << 20))
    with private_s3() as s3:
        with environ_set({k: v for k, v in s3.env().items() if k.startswith("AWS_")}):
            results = [library_comparison(s3, file), upload_ratio(s3, file)]
            results += step_stalls(s3, file, workdir)
            results.append(api_download_ratio(s3, file))
    threading.Thread(target=lambda: None).start()
    return results
