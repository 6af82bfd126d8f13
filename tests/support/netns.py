"""Two hosts on one machine: two network namespaces joined by a veth pair (root and iproute2's
``ip``, as on CI's machines). msrun starts its scheduler on every node where ``MASTER_ADDR``
is a local address, so two "nodes" sharing one network stack would both start one; in their
own namespaces only node 0 holds the address."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator

SUBNET = "10.77.0"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@contextlib.contextmanager
def two_hosts(name: str = "msdet") -> Iterator[tuple[list[str], list[str]]]:
    """``(["ip", "netns", "exec", <ns>] for each host, [each host's address])``; the
    namespaces (and the veth pair with them) are removed on exit."""
    suffix = str(os.getpid())
    names = [f"{name}{i}-{suffix}" for i in range(2)]
    veths = [f"ve{i}{suffix}"[:15] for i in range(2)]
    addresses = [f"{SUBNET}.{i + 1}" for i in range(2)]
    try:
        for ns in names:
            _ip("netns", "add", ns)
        _ip("link", "add", veths[0], "type", "veth", "peer", "name", veths[1])
        for ns, veth, address in zip(names, veths, addresses):
            _ip("link", "set", veth, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", veth)
            _ip("-n", ns, "link", "set", veth, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield [["ip", "netns", "exec", ns] for ns in names], addresses
    finally:
        for ns in names:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
