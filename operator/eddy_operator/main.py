"""`eddy-operator`: run the operator (the handlers in `eddy_operator.handlers`) with kopf, under
leader election (docs/DESIGN.md, "The operator's part").

    eddy-operator                       # every namespace
    eddy-operator -n team-a -n team-b   # only these namespaces (namespaced RBAC)

Several replicas may run: they elect a leader through a Lease in the operator's own namespace
(`eddy_operator.leader`); the leader runs kopf, the others wait and serve liveness and metrics.
A leader that cannot renew the Lease in time exits with status 3 so the kubelet restarts it; on
SIGTERM it stops handling, then clears the Lease's holder so a standby takes over at once.

Environment: EDDY_OPERATOR_METRICS_PORT (8080; -1 turns metrics off),
EDDY_OPERATOR_METRICS_ADDRESS (0.0.0.0), EDDY_OPERATOR_RESYNC_SECONDS (30), POD_NAME and
POD_NAMESPACE (the downward API: the candidate's identity and the Lease's namespace), the
EDDY_OPERATOR_* variables named in `--help` for the flags, KUBECONFIG when run outside a cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

EXIT_LOST_LEADERSHIP = 3
# Set while kopf runs: what a signal must call to stop it.
_STOP_CALLBACKS: list[Callable[[], object]] = []


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    try:
        return float(value) if value else default
    except ValueError:
        raise SystemExit(f"eddy-operator: {name}={value!r} is not a number of seconds") from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="eddy-operator", description="Run the Eddy StreamApp operator.")
    parser.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=None,
        help="watch only this namespace (repeat for several; default: all namespaces)",
    )
    parser.add_argument(
        "--liveness",
        default=os.environ.get("EDDY_OPERATOR_LIVENESS", "http://0.0.0.0:8081/healthz"),
        help="liveness endpoint URL ('' to disable; $EDDY_OPERATOR_LIVENESS)",
    )
    election = parser.add_argument_group("leader election (a coordination.k8s.io/v1 Lease)")
    election.add_argument(
        "--leader-election",
        action=argparse.BooleanOptionalAction,
        default=os.environ.get("EDDY_OPERATOR_LEADER_ELECTION", "true").lower() not in ("false", "0", "no"),
        help="run only while holding the Lease (default: on; $EDDY_OPERATOR_LEADER_ELECTION)",
    )
    election.add_argument(
        "--lease-name",
        default=os.environ.get("EDDY_OPERATOR_LEASE_NAME", "eddy-operator"),
        help="the Lease's name ($EDDY_OPERATOR_LEASE_NAME; default eddy-operator)",
    )
    election.add_argument(
        "--lease-namespace",
        default=os.environ.get("EDDY_OPERATOR_LEASE_NAMESPACE"),
        help="the Lease's namespace ($EDDY_OPERATOR_LEASE_NAMESPACE; default $POD_NAMESPACE)",
    )
    election.add_argument(
        "--lease-duration",
        type=float,
        default=_env_float("EDDY_OPERATOR_LEASE_DURATION", 15.0),
        help="seconds a standby waits for a silent leader before taking over ($EDDY_OPERATOR_LEASE_DURATION; 15)",
    )
    election.add_argument(
        "--lease-renew",
        type=float,
        default=_env_float("EDDY_OPERATOR_LEASE_RENEW", 5.0),
        help="seconds between the leader's renewals ($EDDY_OPERATOR_LEASE_RENEW; 5)",
    )
    election.add_argument(
        "--lease-retry",
        type=float,
        default=_env_float("EDDY_OPERATOR_LEASE_RETRY", 2.0),
        help="seconds between attempts after a failed or refused one, and each request's timeout; "
        "the leader gives up after duration - 2 x retry without a renewal ($EDDY_OPERATOR_LEASE_RETRY; 2)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def _run_kopf(args: argparse.Namespace, stop: threading.Event | None,
              on_stopped: Callable[[], None] | None = None) -> None:
    """Run kopf until `stop`; `on_stopped` runs as soon as kopf has stopped handling, before
    `asyncio.run` waits for handler threads still blocked in an apiserver call."""
    import kopf

    import eddy_operator.handlers  # noqa: F401  (registers the handlers)

    async def operate() -> None:
        # kopf waits on a non-asyncio stop flag in a thread that never ends (asyncio.run could
        # not finish), and when a signal stops it, it waits 5 s for its own stop-flag waiter:
        # so an asyncio.Event, set by signals once kopf is up (before that, by `request_stop`).
        flag, ready = asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()
        if stop is not None:
            _STOP_CALLBACKS.append(lambda: loop.call_soon_threadsafe(flag.set))
            if stop.is_set():  # a signal came before the callback was there
                return

            async def take_signals() -> None:
                await ready.wait()  # kopf has installed its handlers: replace them
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, _log_and_set, sig, flag)

            signals_task = asyncio.create_task(take_signals())  # noqa: F841 - runs until kopf is ready
        try:
            await kopf.operator(
                ready_flag=ready,
                # kopf's own peering stays off: with leader election the Lease decides who acts.
                standalone=True,
                clusterwide=not args.namespace,
                namespaces=args.namespace or (),
                liveness_endpoint=args.liveness or None,
                stop_flag=flag,
            )
        finally:
            if on_stopped is not None:
                on_stopped()

    try:
        asyncio.run(operate())
    finally:
        _STOP_CALLBACKS.clear()


def _log_and_set(sig: signal.Signals, flag: asyncio.Event) -> None:
    logging.getLogger(__name__).info("signal %s: stopping", sig.name)
    flag.set()


def _exit_lost_leadership() -> None:
    """No graceful stop: handlers must not act once the Lease may belong to another replica."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(EXIT_LOST_LEADERSHIP)


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from eddy_contract.kube import api_client
    from eddy_operator import health, leader, metrics

    try:
        timing = leader.LeaderTiming(args.lease_duration, args.lease_renew, args.lease_retry)
        namespace = leader.lease_namespace(args.lease_namespace) if args.leader_election else ""
    except leader.LeaderElectionError as err:
        parser.error(str(err))

    port = int(os.environ.get("EDDY_OPERATOR_METRICS_PORT", "8080"))
    if port >= 0:  # before the election: a standby is scraped too
        metrics.serve(os.environ.get("EDDY_OPERATOR_METRICS_ADDRESS", "0.0.0.0"), port)
    if not args.leader_election:
        metrics.LEADER.set(1)
        _run_kopf(args, None)
        return

    lock = leader.LeaseLock(api_client(), namespace, args.lease_name, request_timeout_s=timing.retry_interval_s)
    elector = leader.LeaderElector(
        lock, leader.identity_for(os.environ.get("POD_NAME")), timing, on_lost=_exit_lost_leadership
    )
    stop = threading.Event()

    def request_stop(signum: int, _frame: Any) -> None:
        logging.getLogger(__name__).info("signal %d: stopping", signum)
        stop.set()
        for callback in list(_STOP_CALLBACKS):
            callback()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    standby = (
        health.StandbyHealthServer(args.liveness, lambda: elector.last_attempt_at, timing.lease_duration_s)
        if args.liveness
        else None
    )
    try:
        leading = elector.campaign(stop)
    finally:
        if standby is not None:
            standby.close()
    if not leading:
        return
    metrics.LEADER.set(1)
    elector.keep_renewing()

    def hand_over() -> None:
        elector.stop_renewing()
        elector.release()

    try:
        # kopf installs its own SIGTERM/SIGINT handlers; `stop` covers a signal that came before.
        _run_kopf(args, stop, on_stopped=hand_over)
    finally:
        hand_over()  # a no-op once done
        metrics.LEADER.set(0)
        metrics.shutdown()


if __name__ == "__main__":
    main()
