"""A 2-node job on hosts that share no disk: workers in network namespaces of their own
(tests/support/netns.py), each with a data dir of its own, sharing only the API, PostgreSQL,
Redis and an S3 store (moto's server), all reached over the bridge.

Unlike tests/e2e/test_multinode.py, where every node is 127.0.0.1, each worker here has only its
own address on a bridge (10.77.X.2 and .3; the host is .1). It reaches Redis, PostgreSQL (through
a forwarder) and the store over the bridge, and the other node at the address that node
publishes (LAUNCHBAY_WORKER_HOST). GLOO_SOCKET_IFNAME pins gloo to the namespace's veth: it would
otherwise resolve the machine's host name to an address the namespace cannot reach.

The job is user code (kept in the store; each worker fetches it by sha256) that saves
torch.distributed.checkpoint folders on node 0's disk; node 0's worker uploads each and
registers it once whole in the store. Node 0's host then dies (every process in its namespace
killed); the retried attempt runs on the surviving worker and a new one with an empty data dir,
both fetching the latest checkpoint from the store, resumes from it and succeeds; the SDK
downloads the directory checkpoint and verifies every file.

Needs root and `ip netns`; skipped otherwise.
"""

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from sqlalchemy.engine import make_url

from client import Client
from service.artifacts import ObjectMissing, open_store
from service.settings import Settings
from tests.conftest import make_stack
from tests.support import netns
from tests.support.forward import forwarded
from tests.support.procs import job_processes, wait_until
from tests.support.services import private_redis, private_s3

QUEUE = "netns"
PROGRAM = Path(__file__).parent / "programs" / "dcp_resume.py"


def _netns_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def kill_host(space: str) -> None:
    """SIGKILL every process in the network namespace `space`: the host is gone."""

    def alive() -> list[psutil.Process]:
        return [
            p
            for p in psutil.process_iter(["status"])
            if p.info["status"] != psutil.STATUS_ZOMBIE and _netns_of(p.pid) == space
        ]

    for proc in alive():
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    assert wait_until(lambda: not alive(), timeout=10)


@pytest.fixture
def network() -> Iterator[netns.Network]:
    reason = netns.unavailable()
    if reason is not None:
        pytest.skip(reason)
    with netns.bridged_namespaces(2) as net:
        yield net
    assert not netns.leftovers(), "namespaces or links left behind"


@pytest.mark.alone
def test_a_lost_node_resumes_on_another_host_from_the_store(
    tmp_path: Path, network: netns.Network, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = network
    started = time.monotonic()
    database = make_url(postgres_url)
    assert database.port is not None
    with (
        private_redis(bind=("127.0.0.1", net.address)) as redis,
        private_s3(host=net.address) as s3,
        forwarded(net.address, (database.host or "127.0.0.1", database.port)) as pg_port,
    ):
        bridged_db = database.set(host=net.address, port=pg_port)
        store_env = s3.env(prefix="deploy")
        for env_name, value in store_env.items():
            if env_name.startswith("AWS_"):
                monkeypatch.setenv(env_name, value)  # this test's own look into the store
        stack = make_stack(
            tmp_path / "stack",
            postgres_url,
            redis.url(),
            **store_env,
            LAUNCHBAY_HEARTBEAT_INTERVAL_S="1",
            LAUNCHBAY_REAPER_INTERVAL_S="1",
            LAUNCHBAY_REAPER_LOST_AFTER_S="5",
            # Multi-node jobs start cold: no worker here needs a fork server importing torch
            # as it starts (host c's, started beside a loaded suite, would be late to join).
            LAUNCHBAY_WARM_START="false",
        )
        # Three hosts' disks, none shared: c comes up in a's namespace once a is lost.
        worker_dirs = {name: stack.root / f"host-{name}" for name in ("a", "b", "c")}
        hosts = {"a": net.namespaces[0], "b": net.namespaces[1], "c": net.namespaces[0]}

        def start_worker(name: str) -> int:
            ns = hosts[name]
            proc = stack.start_worker(
                QUEUE,
                prefix=ns.exec_prefix,
                LAUNCHBAY_DATA_DIR=str(worker_dirs[name]),
                LAUNCHBAY_DATABASE_URL=bridged_db.render_as_string(hide_password=False),
                LAUNCHBAY_REDIS_URL=redis.url(host=net.address),
                LAUNCHBAY_WORKER_HOST=ns.address,
                GLOO_SOCKET_IFNAME=ns.veth,
            )
            return proc.pid

        try:
            stack.start_api()
            pids = {name: start_worker(name) for name in ("a", "b")}
            # Each worker in a namespace of its own, not the host's (once `ip` has exec'd it).
            assert wait_until(
                lambda: len({_netns_of(p) for p in pids.values()} - {_netns_of(os.getpid())}) == 2,
                timeout=10,
            ), [_netns_of(p) for p in pids.values()]
            with Client(stack.url, stack.admin_token, backoff_s=0) as lb:
                code = lb.upload_code(PROGRAM)
                job = lb.submit_job(
                    {
                        "name": "netns-no-shared-disk",
                        "code": {"code_id": code.code_id, "entrypoint": PROGRAM.name},
                        "nnodes": 2,
                        "nproc_per_node": 1,
                        "queue": QUEUE,
                        "max_retries": 1,
                        "rendezvous_timeout_s": 60,  # a wrong address fails in 60 s, not 10 min
                        "checkpoint": {"keep_last": 2},
                    }
                )

                def has_step_3() -> bool:
                    return any(c.step == 3 for c in lb.list_checkpoints(job.id))

                assert wait_until(has_step_3, timeout=120), stack.worker_logs()
                saved_s = time.monotonic() - started
                nodes = lb.list_nodes(job.id)
                [first] = [n for n in nodes if n.node == 0 and n.attempt == 1]
                [second] = [n for n in nodes if n.node == 1 and n.attempt == 1]
                assert {first.host, second.host} == {hosts["a"].address, hosts["b"].address}
                # Only rank 0's disk holds the checkpoints it wrote: the node torchrun's c10d
                # rendezvous gave rank 0 (the first to join), node 0 or node 1.
                holding = [
                    name
                    for name in ("a", "b")
                    if (worker_dirs[name] / "checkpoints" / job.id / "step-3").is_dir()
                ]
                assert len(holding) == 1, holding
                [lost] = holding
                survivor = "b" if lost == "a" else "a"
                [kept] = [n for n in (first, second) if n.host == hosts[survivor].address]

                # Rank 0's host dies; a new host with an empty disk comes up in its place.
                kill_host(_netns_of(pids[lost]) or "")
                start_worker("c")
                killed_s = time.monotonic() - started
                done = lb.wait_for_job(job.id, timeout=180)
                assert (done.state, done.attempt) == ("succeeded", 2), (
                    done.message,
                    stack.worker_logs(),
                )
                took_s = time.monotonic() - started

                # The retry: one node on each namespace's address, the rendezvous at one.
                addresses = {ns.address for ns in net.namespaces}
                retry = [n for n in lb.list_nodes(job.id) if n.attempt == 2]
                assert sorted(n.node for n in retry) == [0, 1], retry
                assert {n.host for n in retry} == addresses, retry
                assert len({n.worker for n in retry}) == 2 and kept.worker in {
                    n.worker for n in retry
                }
                assert {n.state for n in retry} == {"succeeded"}, retry
                [hosting] = [n for n in retry if n.endpoint]
                endpoint_host, _, port = (hosting.endpoint or "").rpartition(":")
                assert endpoint_host == hosting.host and port.isdigit(), hosting

                # Both nodes resumed from step-3, fetched from the store, with the code.
                lines = list(lb.iter_logs(job.id))
                text = [line.line for line in lines]
                for rank in (0, 1):
                    assert f"rank {rank} resumed from step-3 at step 3 weight 96.0" in text
                assert "rank 0 of world 2" in text
                assert {line.node for line in lines} == {0, 1}
                for name in (survivor, "c"):
                    assert (worker_dirs[name] / "checkpoints" / job.id / "step-3").is_dir()
                    assert (worker_dirs[name] / "code" / code.code_id).is_dir()
                assert not (worker_dirs["c"] / "checkpoints" / job.id / "step-1").exists()

                # Rank 0 alone reports: every (step, name) once.
                keys = [(p.step, p.name) for p in lb.iter_metrics(job.id)]
                assert keys and len(keys) == len(set(keys))

                # Retention reached the store; what is listed is there and verifies.
                checkpoints = lb.list_checkpoints(job.id)
                assert [(c.step, c.attempt, c.kind) for c in checkpoints] == [
                    (3, 1, "dir"),
                    (4, 2, "dir"),
                ]
                artifacts = open_store(
                    Settings(
                        artifact_store=store_env["LAUNCHBAY_ARTIFACT_STORE"],
                        s3_endpoint_url=store_env["LAUNCHBAY_S3_ENDPOINT_URL"],
                    )
                )
                with pytest.raises(ObjectMissing):
                    artifacts.size(f"checkpoints/{job.id}/step-1")
                got = lb.download_checkpoint(job.id, "latest", tmp_path / "latest.tar")
                assert sorted(p.name for p in got.iterdir()) == sorted(
                    e["path"] for e in checkpoints[-1].manifest or []
                )
                assert wait_until(lambda: not job_processes(job.id), timeout=15)
        finally:
            stack.stop()
    print(
        f"\nno shared disk: step-3 in the store at {saved_s:.1f} s, node 0's host killed at "
        f"{killed_s:.1f} s, resumed on two other hosts and succeeded at {took_s:.1f} s"
    )
