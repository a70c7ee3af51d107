"""A 2-node job on Slurm across two node daemons, each in a network namespace of its own with
a host name of its own (tests/support/netns.py), as a cluster's nodes are: one slurmd per
namespace, the controller and the API on the host, reached over a bridge.

Each node daemon (and so every process of the job on that node) sees a hosts file with both
node names over /etc/hosts, in a mount namespace of its own, so torch's gloo finds the node's
own address from its host name, as on a cluster with DNS (and a resolv.conf without the
machine's name server, which the namespaces cannot reach: lookups fail at once rather than
after a timeout each). The filesystem (SQLite, the data directory, munge's socket) is shared,
as NFS would be.

Needs root, `ip netns` and Debian's Slurm; skipped otherwise.
"""

import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import make_stack
from tests.support import netns
from tests.support.isolation import reachable_by_job_users
from tests.support.procs import job_processes, wait_until
from tests.support.services import private_redis
from tests.support.slurm import PARTITION, SlurmCluster, SlurmNode, unavailable

pytestmark = [pytest.mark.slurm, pytest.mark.alone]

QUEUE = "hpc"


def test_a_two_node_job_runs_across_two_slurmd_with_the_rendezvous_on_the_first(
    tmp_path: Path,
) -> None:
    reason = unavailable() or netns.unavailable()
    if reason is not None:
        pytest.skip(reason)
    tag = os.getpid()
    names = [f"lbn{tag}a", f"lbn{tag}b"]
    with (
        netns.bridged_namespaces(2) as net,
        private_redis(bind=("127.0.0.1", net.address)) as redis,
    ):
        # Read by every process of the job, the job users' too.
        hosts = reachable_by_job_users(tmp_path / "etc") / "hosts"
        hosts.write_text(
            "127.0.0.1 localhost\n"
            + "".join(f"{ns.address} {n}\n" for ns, n in zip(net.namespaces, names, strict=True))
        )
        resolver = hosts.with_name("resolv.conf")
        resolver.write_text("options timeout:1 attempts:1\n")  # no name server
        for path in (hosts, resolver):
            path.chmod(0o644)
        nodes = [
            SlurmNode(name, address=ns.address, netns=ns.name, etc=(hosts, resolver))
            for name, ns in zip(names, net.namespaces, strict=True)
        ]
        cluster = SlurmCluster(tmp_path / "slurm", nodes=nodes, controller_address=net.address)
        os.makedirs(cluster.root)
        stack = make_stack(
            tmp_path / "stack",
            f"sqlite:///{tmp_path / 'launchbay.db'}",
            redis.url(host=net.address),
            LAUNCHBAY_SLURM_QUEUES=json.dumps({QUEUE: {"partition": PARTITION}}),
            LAUNCHBAY_HEARTBEAT_INTERVAL_S="1",
            **cluster.env(),
        )
        try:
            cluster.start()
            stack.start_api()
            with stack.client() as http:
                spec = {
                    "name": "slurm-two-nodes",
                    "recipe": "synthetic",
                    "nnodes": 2,
                    "nproc_per_node": 1,
                    "queue": QUEUE,
                    "rendezvous_timeout_s": 60,
                    "config": {"epochs": 1, "num_samples": 96, "log_every_steps": 1},
                }
                response = http.post("/v1/jobs", json=spec)
                assert response.status_code == 201, response.text
                job_id = response.json()["id"]
                output = stack.data_dir / "runs" / job_id / "slurm-1.out"
                started = time.monotonic()
                try:
                    job = stack.wait_for_state(http, job_id, {"succeeded"}, timeout=180)
                except AssertionError:
                    print(output.read_text(errors="replace")[-6000:])
                    raise
                took_s = time.monotonic() - started
                assert (job["attempt"], job["exit_reason"]) == (1, "completed")
                assert job["worker"] == f"slurm-1:{names[0]}"

                # Node 0 of the allocation, in the first namespace, hosted the rendezvous at
                # its own address; node 1 joined it from the other namespace.
                nodes = http.get(f"/v1/jobs/{job_id}/nodes").json()["items"]
                by_node = {n["node"]: n for n in nodes}
                assert sorted(by_node) == [0, 1], nodes
                assert [by_node[i]["host"] for i in (0, 1)] == [ns.address for ns in net.namespaces]
                assert [by_node[i]["worker"] for i in (0, 1)] == [f"slurm-1:{n}" for n in names]
                assert {n["state"] for n in nodes} == {"succeeded"}, nodes
                endpoint = by_node[0]["endpoint"]
                assert endpoint.rpartition(":")[0] == net.namespaces[0].address, nodes
                assert by_node[1]["endpoint"] is None

                points = http.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 10_000})
                keys = [(p["step"], p["name"]) for p in points.json()["items"]]
                assert keys and len(keys) == len(set(keys))
                assert http.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
                lines = http.get(f"/v1/jobs/{job_id}/logs", params={"limit": 10_000}).json()
                assert {line["node"] for line in lines["items"]} == {0, 1}
                assert any(
                    "world 2" in line["line"] for line in lines["items"] if line["rank"] == 0
                )
            assert wait_until(lambda: not job_processes(job_id), timeout=10)
            # The allocation ended in Slurm too (its step daemons reported to the controller).
            assert wait_until(lambda: not cluster.active_jobs(), timeout=30), cluster.log("slurm")
        finally:
            stack.stop()
            cluster.stop()
    assert not netns.leftovers(), "namespaces or links left behind"
    print(
        f"\nSlurm, 2 nodes in network namespaces: succeeded in {took_s:.1f} s, "
        f"rendezvous at {endpoint}"
    )
