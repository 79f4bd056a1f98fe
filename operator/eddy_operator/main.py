"""`eddy-operator`: run the operator (the handlers in `eddy_operator.handlers`) with kopf.

    eddy-operator                       # every namespace
    eddy-operator -n team-a -n team-b   # only these namespaces (namespaced RBAC)

Environment: EDDY_OPERATOR_METRICS_PORT (8080; -1 turns metrics off),
EDDY_OPERATOR_METRICS_ADDRESS (0.0.0.0), EDDY_OPERATOR_RESYNC_SECONDS (30), KUBECONFIG when run
outside a cluster.
"""

from __future__ import annotations

import argparse
import logging
import os


def main(argv: list[str] | None = None) -> None:
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
        help="liveness endpoint URL ('' to disable)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    args = parser.parse_args(argv)

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    import kopf

    import eddy_operator.handlers  # noqa: F401  (registers the handlers)

    kopf.run(
        standalone=True,
        clusterwide=not args.namespace,
        namespaces=args.namespace or (),
        liveness_endpoint=args.liveness or None,
    )


if __name__ == "__main__":
    main()
