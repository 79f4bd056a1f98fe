"""Ends an executor JVM that is still attached to a driver gone without a word.

An executor JVM learns that its driver is gone from its connection: a driver process that ends
(its pod deleted, its container restarted) closes it, the JVM exits, and the container's
entrypoint (docker/entrypoint.sh) starts a new one, which registers with the next driver while
the task runner goes on. A driver whose node dies closes nothing: its packets are dropped, the
connection stays established, and the JVM only gives up after `spark.executor.heartbeat.maxFailures`
heartbeats (60 of 10 s: ten minutes), long after the next driver has adopted the executor pods and
waits for them to register (docs/reliability.md, finding 15).

So the entrypoint runs this beside each JVM. Every `INTERVAL_S` it reads the JVM's own established
connections to the driver's port (/proc/<pid>/fd and /proc/<pid>/net/tcp{,6}) and ends the JVM
(SIGTERM; the next one registers with whichever driver runs then) on either sign:

- **stale address**: the driver's name (the driver URL's host: the driver pod's stable DNS name,
  which names the newest driver pod once that is ready) no longer has the address the JVM is
  connected to, `CHECKS` looks in a row: a new driver runs on a new pod address;
- **stalled connection**: the kernel has been retransmitting on the driver connection (data sent,
  none of it acknowledged) for `STALL_S` on every look. The JVM sends a heartbeat every 10 s, and
  the driver's kernel acknowledges it whatever its JVM does (a garbage collection pauses the JVM,
  not its TCP stack), so a connection that stays unacknowledged that long goes to a host that is
  gone or cut off: a driver whose node died, while its name still has the dead pod's address.

A name that does not resolve (no driver ready yet) or a JVM with no driver connection (starting,
or reconnecting) is left alone: Spark's own handling stands.

    python -m eddy_runtime.executor.driver_watch JVM_PID SPARK_DRIVER_URL
"""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

log = logging.getLogger("eddy.executor.driver_watch")

#: seconds between two looks
INTERVAL_S = 2.0
#: looks in a row that must find the JVM on a stale address before it is ended (a name that
#: changes while the JVM reconnects is not enough)
CHECKS = 3
#: seconds a driver connection may go unacknowledged (retransmitting on every look) before the JVM
#: is ended: two missed heartbeats
STALL_S = 20.0
#: /proc/net/tcp's state of an established connection
ESTABLISHED = "01"


class Connection(NamedTuple):
    """One of the JVM's established connections to the driver's port."""

    remote: str
    #: the kernel's retransmissions of the oldest unacknowledged segment (0 once it is acknowledged)
    retransmits: int


def driver_endpoint(url: str) -> tuple[str, int]:
    """The host and port of a Spark driver URL (``spark://CoarseGrainedScheduler@host:7078``)."""
    parts = urlsplit(url)
    if parts.scheme != "spark" or not parts.hostname or parts.port is None:
        raise ValueError(f"not a Spark driver URL: {url!r}")
    return parts.hostname, parts.port


def _address(hex_address: str) -> str:
    """An address as /proc/net/tcp{,6} writes it (hex, in 32-bit words of the host's byte order),
    IPv4-mapped IPv6 addresses as IPv4."""
    raw = bytes.fromhex(hex_address)
    flipped = raw if sys.byteorder == "big" else b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    if len(flipped) == 4:
        return str(ipaddress.IPv4Address(flipped))
    v6 = ipaddress.IPv6Address(flipped)
    return str(v6.ipv4_mapped or v6)


def driver_connections(tables: Iterable[str], inodes: set[str], port: int) -> list[Connection]:
    """The established connections to `port` among the sockets `inodes`, from the text of
    /proc/<pid>/net/tcp and tcp6 (`tables`: sl, local, remote, state, queues, timer, retrnsmt,
    uid, probes, inode, ...)."""
    found = []
    for table in tables:
        for line in table.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 10 or fields[3] != ESTABLISHED or fields[9] not in inodes:
                continue
            remote, _, remote_port = fields[2].rpartition(":")
            if int(remote_port, 16) == port:
                found.append(Connection(_address(remote), int(fields[6], 16)))
    return found


def stalled(connections: Sequence[Connection]) -> bool:
    """Whether every driver connection is retransmitting (none if there is no connection)."""
    return bool(connections) and all(c.retransmits > 0 for c in connections)


def stale(connected: set[str], resolved: set[str]) -> bool:
    """Whether a JVM connected to `connected` talks to a driver the name (now `resolved`) no
    longer names. Nothing to say while either is empty."""
    return bool(connected) and bool(resolved) and not connected & resolved


def socket_inodes(pid: int) -> set[str]:
    """The inodes of the process' sockets (its /proc/<pid>/fd links ``socket:[N]``)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def jvm_connections(pid: int, port: int) -> list[Connection]:
    """The process' established connections to `port`."""
    tables = []
    for name in ("tcp", "tcp6"):
        try:
            tables.append(Path(f"/proc/{pid}/net/{name}").read_text())
        except FileNotFoundError:  # no IPv6 in its network namespace
            continue
    return driver_connections(tables, socket_inodes(pid), port)


def resolve(host: str, port: int) -> set[str]:
    """The addresses `host` has now (none if it does not resolve)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return set()
    return {str(info[4][0]) for info in infos}


def alive(pid: int) -> bool:
    """Whether the process is there and not a zombie (ended, not yet reaped). The task runner
    checks its executor JVM with it too (runner.py): this module imports nothing heavy."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def watch(pid: int, url: str, interval_s: float = INTERVAL_S, checks: int = CHECKS, stall_s: float = STALL_S) -> bool:
    """Watch the JVM `pid` until it ends; SIGTERM it once it has been on a stale driver address
    `checks` looks in a row, or on a stalled driver connection for `stall_s`. Whether it was ended
    here."""
    host, port = driver_endpoint(url)
    behind = 0
    stalled_since: float | None = None
    while True:
        if not alive(pid):
            return False
        try:
            connections = jvm_connections(pid, port)
        except (FileNotFoundError, ProcessLookupError):  # the JVM ended meanwhile
            return False
        connected = {c.remote for c in connections}
        resolved = resolve(host, port) if connected else set()  # no connection: nothing to compare
        behind = behind + 1 if stale(connected, resolved) else 0
        now = time.monotonic()
        stalled_since = (now if stalled_since is None else stalled_since) if stalled(connections) else None
        reason = None
        if behind >= checks:
            reason = (f"connected to its driver at {', '.join(sorted(connected))}, but {host} is "
                      f"{', '.join(sorted(resolved))} now: the driver it registered with is gone")
        elif stalled_since is not None and now - stalled_since >= stall_s:
            reason = (f"on a stalled driver connection: {', '.join(sorted(connected))} has acknowledged nothing for "
                      f"{now - stalled_since:.0f} s (the kernel retransmits, "
                      f"{max(c.retransmits for c in connections)} times so far): that host is gone or cut off")
        if reason is not None:
            log.warning("executor JVM %d is %s; ending the JVM so that a new one registers", pid, reason)
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                return False
            return True
        time.sleep(interval_s)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or not args[0].isdigit():
        print("usage: python -m eddy_runtime.executor.driver_watch JVM_PID SPARK_DRIVER_URL", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    watch(int(args[0]), args[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
