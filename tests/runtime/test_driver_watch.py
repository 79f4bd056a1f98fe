"""The executor container's driver watch (eddy_runtime/executor/driver_watch.py): a JVM whose
driver connection goes to an address the driver's name no longer has is ended, one on the
address the name has is left alone; so is one whose driver connection stays unacknowledged. The
processes and their connections are real (on loopback: 127.0.0.2 stands for the dead driver's
address, `localhost` for the driver's name; a stalled connection is one whose packets a firewall
rule drops, in a network namespace of the test's own)."""

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
    # 112 is closing (06), 113 goes to another port, 999 is another process' socket; 111 has
    # retransmitted its oldest segment 12 times (0000000C)
    assert driver_watch.driver_connections([TCP, TCP6], inodes, 7078) == [
        driver_watch.Connection("10.244.2.5", 12),
        driver_watch.Connection("10.244.2.8", 0),
        driver_watch.Connection("::1", 0),
    ]


def test_a_jvm_is_stalled_only_while_every_driver_connection_retransmits() -> None:
    dead, live = driver_watch.Connection("10.244.2.5", 3), driver_watch.Connection("10.244.2.8", 0)
    assert driver_watch.stalled([dead])
    assert not driver_watch.stalled([dead, live])  # a connection that is acknowledged: the driver is there
    assert not driver_watch.stalled([live])
    assert not driver_watch.stalled([])  # not connected (yet)


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


STALLED_JVM = """
import socket, subprocess, sys, time
from eddy_runtime.executor import driver_watch

subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
driver = socket.create_server(("127.0.0.1", 0))
port = driver.getsockname()[1]
# the 'JVM': connected to the driver, a heartbeat every 0.2 s
jvm = subprocess.Popen([sys.executable, "-c", f'''
import socket, time
s = socket.create_connection(("127.0.0.1", {port}))
while True:
    s.send(b"heartbeat")
    time.sleep(0.2)
'''])
time.sleep(0.5)
if sys.argv[1] == "cut":  # the driver's host goes: nothing it is sent arrives
    subprocess.run(["iptables", "-A", "INPUT", "-p", "tcp", "--dport", str(port), "-j", "DROP"], check=True)
started = time.monotonic()
# the name keeps the JVM's address, as a dead pod's name does until the pod is gone
ended = driver_watch.watch(jvm.pid, f"spark://CoarseGrainedScheduler@127.0.0.1:{port}", interval_s=0.2,
                           stall_s=2.0) if sys.argv[1] == "cut" else None
if ended is None:  # a live driver: the watch must still be watching after 4 s
    watcher = subprocess.Popen([sys.executable, "-c", f'''
from eddy_runtime.executor import driver_watch
print(driver_watch.watch({jvm.pid}, "spark://CoarseGrainedScheduler@127.0.0.1:{port}", interval_s=0.2, stall_s=2.0))
'''], stdout=subprocess.PIPE, text=True)
    time.sleep(4)
    ended = watcher.poll() is not None
    watcher.kill()
print(ended, round(time.monotonic() - started, 1), jvm.wait(10) if ended else "running", flush=True)
jvm.kill()
"""


def in_own_network_namespace(case: str) -> list[str]:
    """What STALLED_JVM prints, run in a network namespace of its own (its firewall rule stays there)."""
    done = subprocess.run(["unshare", "--net", sys.executable, "-c", STALLED_JVM, case],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_jvm_whose_driver_acknowledges_nothing_is_ended_although_the_name_keeps_its_address() -> None:
    ended, after_s, exit_code = in_own_network_namespace("cut")
    assert ended == "True"
    assert 2.0 <= float(after_s) < 10.0  # stall_s, and the first retransmission's timeout before it
    assert exit_code == "-15"  # SIGTERM


def test_a_jvm_whose_driver_acknowledges_its_heartbeats_is_left_alone() -> None:
    ended, _after_s, state = in_own_network_namespace("live")
    assert (ended, state) == ("False", "running")
