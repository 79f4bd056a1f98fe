"""The executor container's driver watch (eddy_runtime/executor/driver_watch.py): a JVM whose
driver connection goes to an address the driver's name no longer has is ended, one on the
address the name has is left alone. The processes and their connections are real (on loopback:
127.0.0.2 stands for the dead driver's address, `localhost` for the driver's name)."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from eddy_runtime.executor import driver_watch

pytestmark = pytest.mark.unit

TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0500F40A:83A0 0502F40A:1BA6 01 00003030:00000000 01:000003AB 0000000C   185        0 111 3
   1: 0500F40A:83A2 0602F40A:1BA6 06 00000000:00000000 00:00000000 00000000   185        0 112 3
   2: 0500F40A:83A4 0602F40A:1BA7 01 00000000:00000000 00:00000000 00000000   185        0 113 3
   3: 0500F40A:83A6 0702F40A:1BA6 01 00000000:00000000 00:00000000 00000000   185        0 999 3
"""
TCP6 = """\
  sl  local_address remote_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
   2: 0000000000000000FFFF00000500F40A:83B0 0000000000000000FFFF00000802F40A:1BA6 01 0:0 0:0 0 185 0 114 3
   3: 00000000000000000000000001000000:83B2 00000000000000000000000001000000:1BA6 01 0:0 0:0 0 185 0 115 3
"""


def test_the_driver_url_names_host_and_port() -> None:
    assert driver_watch.driver_endpoint("spark://CoarseGrainedScheduler@d-0.d.ns.svc:7078") == ("d-0.d.ns.svc", 7078)
    with pytest.raises(ValueError, match="not a Spark driver URL"):
        driver_watch.driver_endpoint("http://d-0:7078")


def test_only_the_processes_established_connections_to_the_driver_port_count() -> None:
    inodes = {"111", "112", "113", "114", "115"}
    # 112 is closing (06), 113 goes to another port, 999 is another process' socket
    assert driver_watch.connected_addresses([TCP, TCP6], inodes, 7078) == {"10.244.2.5", "10.244.2.8", "::1"}


def test_a_jvm_is_stale_only_when_both_sides_are_known_and_share_no_address() -> None:
    assert driver_watch.stale({"10.244.2.5"}, {"10.244.2.6"})
    assert not driver_watch.stale({"10.244.2.6"}, {"10.244.2.6"})
    assert not driver_watch.stale(set(), {"10.244.2.6"})  # not connected (yet)
    assert not driver_watch.stale({"10.244.2.5"}, set())  # no driver ready: the name does not resolve


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A 'driver' on 127.0.0.2, a port of its own (that address also answers on 127.0.0.1)."""
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        s.listen()
        yield s


def jvm(address: str, port: int, lives_s: float) -> subprocess.Popen[str]:
    """A stand-in for the JVM: connected to `address`:`port`, ending on its own after `lives_s`."""
    code = textwrap.dedent(f"""
        import socket, sys, time
        s = socket.create_connection(({address!r}, {port}))
        print("connected", flush=True)
        time.sleep({lives_s})
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "connected\n"
    return proc


def test_a_jvm_on_an_address_the_name_no_longer_has_is_ended(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    proc = jvm("127.0.0.2", port, lives_s=60)
    try:
        assert driver_watch.watch(proc.pid, f"spark://CoarseGrainedScheduler@localhost:{port}", interval_s=0.1)
        assert proc.wait(10) == -15  # SIGTERM
    finally:
        proc.kill()


def test_a_jvm_on_the_address_the_name_has_is_left_alone(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    proc = jvm("127.0.0.2", port, lives_s=1.5)
    try:
        # the name is the very address the JVM is connected to: never stale, so watch returns
        # only when the JVM ends by itself
        assert not driver_watch.watch(proc.pid, f"spark://CoarseGrainedScheduler@127.0.0.2:{port}", interval_s=0.1)
        assert proc.wait(10) == 0
    finally:
        proc.kill()
