"""Network namespaces on a Linux bridge, so processes of one machine get addresses of their own.

`bridged_namespaces(2)` makes a bridge on the host with the subnet's `.1` address and two
namespaces, each with loopback up and a veth into the bridge holding `.2`, `.3`, ... A process
started with `Namespace.exec_prefix` lives in its namespace: it reaches the host (and the other
namespaces) only over the bridge. Names carry the test run's PID, so parallel or leftover runs do
not collide; the subnet is the first 10.77.X.0/24 no interface of the host has yet. Everything is
removed again on the way out, also when setting up fails half-way.

Needs root and `ip netns`; `unavailable()` says why not.
"""

import ipaddress
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Namespace:
    name: str
    veth: str  # its end of the veth pair, inside the namespace
    address: str

    @property
    def exec_prefix(self) -> list[str]:
        """An argv prefix that runs the command in this namespace."""
        return ["ip", "netns", "exec", self.name]


@dataclass
class Network:
    bridge: str
    address: str  # the host's address on the bridge
    namespaces: list[Namespace] = field(default_factory=list)


def _ip(*args: str, netns: str | None = None) -> str:
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return done.stdout


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = f"lbprobe{os.getpid()}"
    try:
        _ip("netns", "add", probe)
    except (RuntimeError, OSError) as exc:
        return f"`ip netns` is unavailable: {exc}"
    try:
        _ip("netns", "del", probe)
    except RuntimeError:
        pass
    return None


def _free_subnet() -> ipaddress.IPv4Network:
    used = [
        ipaddress.IPv4Interface(word).network
        for line in _ip("-4", "-o", "addr", "show").splitlines()
        for word in line.split()[3:4]
    ]
    start = os.getpid() % 200
    for i in range(256):
        subnet = ipaddress.IPv4Network(f"10.77.{(start + i) % 256}.0/24")
        if not any(subnet.overlaps(u) for u in used):
            return subnet
    raise RuntimeError("no free 10.77.X.0/24 subnet on this host")


def _quietly(*args: str) -> None:
    try:
        _ip(*args)
    except RuntimeError:
        pass


@contextmanager
def bridged_namespaces(count: int = 2) -> Iterator[Network]:
    tag = str(os.getpid())
    subnet = _free_subnet()
    hosts = list(subnet.hosts())
    prefix = subnet.prefixlen
    network = Network(bridge=f"lbbr{tag}", address=str(hosts[0]))
    names = [f"lb-{tag}-{i}" for i in range(count)]
    host_ends = [f"lbh{tag}n{i}" for i in range(count)]
    try:
        _ip("link", "add", network.bridge, "type", "bridge")
        _ip("addr", "add", f"{network.address}/{prefix}", "dev", network.bridge)
        _ip("link", "set", network.bridge, "up")
        for i, (name, host_end) in enumerate(zip(names, host_ends, strict=True)):
            ns = Namespace(name=name, veth=f"lbv{tag}n{i}", address=str(hosts[i + 1]))
            _ip("netns", "add", name)
            network.namespaces.append(ns)
            _ip("link", "add", host_end, "type", "veth", "peer", "name", ns.veth, "netns", name)
            _ip("link", "set", host_end, "master", network.bridge, "up")
            _ip("addr", "add", f"{ns.address}/{prefix}", "dev", ns.veth, netns=name)
            _ip("link", "set", ns.veth, "up", netns=name)
            _ip("link", "set", "lo", "up", netns=name)
        yield network
    finally:
        # Deleting a namespace removes its veth end, and with it the host end; the host ends are
        # deleted too in case a namespace never got its end. Errors are those of never-made parts.
        for name, host_end in zip(names, host_ends, strict=True):
            _quietly("netns", "del", name)
            _quietly("link", "del", host_end)
        _quietly("link", "del", network.bridge)


def leftovers(tag: str | None = None) -> list[str]:
    """Namespaces and links of a run (this process's by default) that still exist."""
    tag = tag or str(os.getpid())
    found = [
        line.split()[0]
        for line in _ip("netns", "list").splitlines()
        if line.startswith(f"lb-{tag}-")
    ]
    for line in _ip("-o", "link", "show").splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name in (f"lbbr{tag}",) or name.startswith(f"lbh{tag}n"):
            found.append(name)
    return found
