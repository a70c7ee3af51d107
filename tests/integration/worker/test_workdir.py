"""The working directory of a plain program (real worker as root, real job user): a writable copy
of its code whose written files are kept as artifacts, never a link out of it nor a hard link
to another user's file; checkpoints it reports or declares are Launchbay's own copies, which
stay whole whatever it does to its files; and nothing of it is left on the host."""

import hashlib
import os
import stat
import uuid
from pathlib import Path

import pytest

from service.artifacts.tree import TreeDigest, scan_tree
from tests.integration.worker.conftest import WorkerEnv
from tests.integration.worker.test_stops import run_in_background
from tests.support.procs import wait_until
from worker.isolation import can_switch_users

pytestmark = pytest.mark.skipif(not can_switch_users(), reason="job users need a root worker")

OUTPUTS = {"checkpoints": ["model.pt", "out/checkpoint-*"]}


def kept_sha256(path: Path) -> str:
    if path.is_dir():
        digest = TreeDigest(path, scan_tree(path))
        for _ in digest.stream():
            pass
        return digest.sha256
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_plain_program_writes_its_working_directory_and_registered_means_kept(
    wenv: WorkerEnv, tmp_path: Path
) -> None:
    marker = f"workdir-{uuid.uuid4().hex}"
    job_id = wenv.submit(
        "workdir_program.py", launcher="python", nproc_per_node=1, outputs=OUTPUTS,
        env={"MARKER": marker},
    )  # fmt: skip
    code = wenv.settings.code_dir / hashlib.sha256(b"workdir_program.py").hexdigest()
    (code / "config.json").write_text('{"changed": false}\n')
    data = wenv.settings.data_dir.resolve()
    work = data / "runs" / job_id / "attempt-1" / "work"
    artifacts = data / "artifacts" / job_id
    # Another user's file on the same filesystem, which the job user may not read.
    secret = data / f"secret-{marker}"
    secret.write_text("not the job's\n")
    secret.chmod(0o600)

    thread, _ = run_in_background(wenv, job_id)
    assert wait_until(lambda: len(wenv.checkpoints(job_id)) == 3, timeout=60), wenv.logs(job_id)
    # What a job user can do where fs.protected_hardlinks is 0 (not on this host: planted here).
    os.link(secret, work / "stolen.bin")
    os.link(secret, artifacts / "stolen.bin")
    (work / "go").touch()
    thread.join(timeout=60)
    job = wenv.job(job_id)
    assert job.state == "succeeded", (job.message, [line.line for line in wenv.logs(job_id)])

    # The program deleted, truncated and removed its checkpoints: the kept copies are whole.
    checkpoints = {
        c.path.removeprefix(f"checkpoints/{job_id}/"): c for c in wenv.checkpoints(job_id)
    }
    assert sorted(checkpoints) == ["step-1.pt", "work/model.pt", "work/out/checkpoint-7"]
    assert [checkpoints[p].step for p in sorted(checkpoints)] == [1, None, 7]
    assert checkpoints["work/out/checkpoint-7"].kind == "dir"
    for checkpoint in checkpoints.values():
        kept = data / checkpoint.path
        assert kept_sha256(kept) == checkpoint.sha256, checkpoint.path
        assert kept.stat().st_uid == os.getuid()
    assert checkpoints["work/model.pt"].size > 100
    # The cut model.pt was seen when the ranks were gone, and refused: not a complete zip.
    assert job.message == "1 reported checkpoint(s) not registered"

    # What it wrote is kept as artifacts; not its unchanged code, its declared checkpoints, a
    # link out of the directory, nor a hard link to another user's file.
    kept = sorted(p.relative_to(artifacts).as_posix() for p in artifacts.rglob("*") if p.is_file())
    assert kept == ["config.json", "logs/metrics.json"]
    assert (artifacts / "config.json").read_text() == '{"changed": true}\n'
    for path in (artifacts / "config.json", artifacts / "logs" / "metrics.json"):
        st = path.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (os.getuid(), 0o640)
    st = secret.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), st.st_nlink) == (0, 0, 0o600, 1)

    # Nothing of it is left on the host: its working directory, home, scratch and checkpoint
    # directory are gone, and it never wrote to the host's /tmp or /var/tmp.
    attempt = data / "runs" / job_id / "attempt-1"
    assert sorted(p.name for p in attempt.iterdir()) == ["events.jsonl", "logs", "pids.json"]
    assert not any(Path(d, marker).exists() for d in ("/tmp", "/var/tmp"))
    secret.unlink()
