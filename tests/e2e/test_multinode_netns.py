"""A 2-node job whose workers live in network namespaces of their own (tests/support/netns.py).

Unlike tests/e2e/test_multinode.py, where every node is 127.0.0.1, each worker here has only its
own address on a bridge (10.77.X.2 and .3; the host is .1). It reaches Redis over the bridge and
the other node at the address that node publishes (LAUNCHBAY_WORKER_HOST). The filesystem (SQLite,
the data directory) is shared, as NFS would be; the API runs on the host. GLOO_SOCKET_IFNAME pins
gloo to the namespace's veth: it would otherwise resolve the machine's host name to an address the
namespace cannot reach.

Needs root and `ip netns`; skipped otherwise.
"""

import os
import time
from pathlib import Path

import pytest

from tests.conftest import make_stack
from tests.support import netns
from tests.support.procs import job_processes, wait_until
from tests.support.services import private_redis

QUEUE = "netns"


def _netns_of(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def test_two_workers_in_their_own_network_namespaces_run_one_job(tmp_path: Path) -> None:
    reason = netns.unavailable()
    if reason is not None:
        pytest.skip(reason)

    with (
        netns.bridged_namespaces(2) as net,
        private_redis(bind=("127.0.0.1", net.address)) as redis,
    ):
        stack = make_stack(
            tmp_path / "stack", f"sqlite:///{tmp_path / 'launchbay.db'}", redis.url()
        )
        try:
            stack.start_api()
            workers = [
                stack.start_worker(
                    QUEUE,
                    prefix=ns.exec_prefix,
                    LAUNCHBAY_REDIS_URL=redis.url(host=net.address),
                    LAUNCHBAY_WORKER_HOST=ns.address,
                    GLOO_SOCKET_IFNAME=ns.veth,
                )
                for ns in net.namespaces
            ]
            # Each worker is in a namespace of its own, not the host's (once `ip` has exec'd it).
            host_space = _netns_of(os.getpid())
            assert wait_until(
                lambda: len({_netns_of(w.pid) for w in workers} - {host_space}) == 2, timeout=10
            ), [_netns_of(w.pid) for w in workers]

            with stack.client() as http:
                spec = {
                    "name": "netns-two-nodes",
                    "recipe": "synthetic",
                    "nnodes": 2,
                    "nproc_per_node": 1,
                    "queue": QUEUE,
                    "rendezvous_timeout_s": 30,  # a wrong address fails in 30 s, not 10 min
                    "config": {"epochs": 2, "log_every_steps": 1},
                }
                started = time.monotonic()
                response = http.post("/v1/jobs", json=spec)
                assert response.status_code == 201, response.text
                job_id = response.json()["id"]
                job = stack.wait_for_state(http, job_id, {"succeeded"}, timeout=180)
                took_s = time.monotonic() - started
                assert (job["attempt"], job["exit_reason"]) == (1, "completed")

                # One node on each namespace's address; the rendezvous at one of them.
                addresses = {ns.address for ns in net.namespaces}
                nodes = http.get(f"/v1/jobs/{job_id}/nodes").json()["items"]
                assert sorted(n["node"] for n in nodes) == [0, 1], nodes
                assert {n["host"] for n in nodes} == addresses, nodes
                assert len({n["worker"] for n in nodes}) == 2, nodes
                assert {n["state"] for n in nodes} == {"succeeded"}, nodes
                [hosting] = [n for n in nodes if n["endpoint"]]
                endpoint_host, _, port = hosting["endpoint"].rpartition(":")
                assert endpoint_host == hosting["host"] and endpoint_host in addresses, hosting
                assert port.isdigit()

                # Rank 0 alone reports: every (step, name) once; it saw a world of two.
                points = http.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 10_000})
                keys = [(p["step"], p["name"]) for p in points.json()["items"]]
                assert keys and len(keys) == len(set(keys))
                logs = http.get(f"/v1/jobs/{job_id}/logs", params={"limit": 10_000})
                lines = logs.json()["items"]
                assert {line["node"] for line in lines} == {0, 1}
                assert any("world 2" in line["line"] for line in lines if line["rank"] == 0)
                assert wait_until(lambda: not job_processes(job_id), timeout=10)
        finally:
            stack.stop()

    assert not netns.leftovers(), "namespaces or links left behind"
    print(
        f"\nmulti-node in network namespaces: 2 nodes ({', '.join(sorted(addresses))}) "
        f"succeeded in {took_s:.1f} s, rendezvous at {hosting['endpoint']}, {len(keys)} points"
    )
