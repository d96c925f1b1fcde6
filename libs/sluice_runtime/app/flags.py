"""The flags every controller accepts, named and spelled as Flux's controllers take
them, and what they mean for the namespaces a controller watches.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os

from sluice_api.meta import parse_duration


def duration(text: str) -> float:
    try:
        return parse_duration(text).total_seconds()
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


_SIZE_UNITS = {
    "": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "K": 10**3, "M": 10**6, "G": 10**9,
}  # fmt: skip


def size(text: str) -> int:
    """A byte count for a flag, as Kubernetes quantities write it: `65536`, `64Mi`, `1Gi`."""
    number = text.rstrip("KMGi")
    unit = text[len(number) :]
    if not number.isdigit() or unit not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size (bytes, or with Ki/Mi/Gi)")
    return int(number) * _SIZE_UNITS[unit]


def version() -> str:
    """The installed distribution's version (what the image and chart are tagged with)."""
    try:
        return importlib.metadata.version("sluice")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def parser(*, service: str, description: str, concurrency: int) -> argparse.ArgumentParser:
    """The flags every controller accepts, named as Flux's controllers name them."""
    p = argparse.ArgumentParser(prog=service, description=description)
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    p.add_argument("--kubeconfig", help="path to a kubeconfig (default: $KUBECONFIG, in-cluster)")
    p.add_argument("--concurrent", type=int, default=concurrency, help="reconcile workers")
    p.add_argument("--metrics-addr", default=":8080", help="Prometheus metrics address")
    p.add_argument("--health-addr", default=":9440", help="/healthz and /readyz address")
    p.add_argument("--events-addr", default="", help="notification-controller event endpoint")
    p.add_argument(
        "--events-token-file",
        default="",
        help=(
            "file holding the token that authenticates events at the notification-controller "
            "(default: the pod's service-account token)"
        ),
    )
    p.add_argument("--enable-leader-election", action="store_true")
    p.add_argument("--leader-election-lease-duration", type=duration, default=35.0)
    p.add_argument("--leader-election-renew-deadline", type=duration, default=30.0)
    p.add_argument("--leader-election-retry-period", type=duration, default=5.0)
    p.add_argument(
        "--watch-all-namespaces",
        type=_bool,
        default=True,
        help="watch every namespace (false: only $RUNTIME_NAMESPACE)",
    )
    p.add_argument(
        "--watch-namespace", default="", help="watch only this namespace (overrides the above)"
    )
    p.add_argument("--watch-label-selector", default="", help="only reconcile matching objects")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--log-encoding", default="json", choices=["json", "console"])
    p.add_argument("--min-retry-delay", type=duration, default=0.75)
    p.add_argument("--max-retry-delay", type=duration, default=900.0)
    p.add_argument("--kube-api-qps", type=float, default=50.0)
    p.add_argument("--kube-api-burst", type=int, default=300)
    p.add_argument("--shutdown-timeout", type=duration, default=30.0)
    p.add_argument(
        "--requested-hold",
        type=duration,
        default=2.0,
        help="while a requested reconcile (a webhook's, the CLI's) is in flight, hold this "
        "process's other API requests back for at most this long, so the API server serves "
        "it first; 0 turns it off",
    )
    switch(
        p,
        "--profile-phases",
        help="sample CPU by reconcile phase into sluice_phase_cpu_seconds_total (benchmarks)",
    )
    p.add_argument(
        "--trace-requests",
        default="",
        metavar="FILE",
        help="append a JSON line per requested reconcile to FILE: its queue wait, steps, API "
        "requests and the event loop's lag meanwhile (benchmarks)",
    )
    switch(
        p,
        "--fifo-loop",
        help="run the event loop's ready callbacks first come, first served, requested "
        "reconciles' too (the code before their lane in the loop, to compare; benchmarks)",
    )
    return p


def switch(parser: argparse.ArgumentParser, name: str, *, help: str, default: bool = False) -> None:
    """A boolean flag spelled as Go's flag package takes it: `--name`,
    `--name=true` or `--name=false`, the last one given winning. Flux's
    manifests and patches write `=true`, and a patch that appends
    `--name=false` turns off what the shipped manifest turned on."""
    parser.add_argument(name, type=_bool, nargs="?", const=True, default=default, help=help)


DEFAULT_SERVICE_ACCOUNT = "default"
"""What `--default-service-account` is when not given: the object's namespace's
`default` account, the value Flux's multi-tenancy lockdown documents."""

LOCKDOWN_FLAGS = ("--no-cross-namespace-refs", "--default-service-account")
"""The multi-tenancy lockdown, on by default in every binary: without them a
controller started by hand (or by a Deployment that forgot them) would apply
as itself and follow references into any namespace."""


def open_tenancy(parser: argparse.ArgumentParser) -> list[str]:
    """The flags that turn the lockdown off, for the ones `parser` has: for a
    single-tenant cluster (`sluice dev`'s own, the chart with
    `multitenancy.enabled=false`, tests of the open behaviour)."""
    known = vars(parser.parse_args([]))
    argv = []
    if "no_cross_namespace_refs" in known:
        argv.append("--no-cross-namespace-refs=false")
    if "default_service_account" in known:
        argv.append("--default-service-account=")
    return argv


def no_cross_namespace_refs(parser: argparse.ArgumentParser, *, help: str) -> None:
    """`--no-cross-namespace-refs`, on unless `=false` is given (the lockdown)."""
    switch(
        parser,
        "--no-cross-namespace-refs",
        help=f"{help} (default true; =false allows references across namespaces)",
        default=True,
    )


def default_service_account(parser: argparse.ArgumentParser, *, kind: str) -> None:
    """`--default-service-account`, `default` unless given; empty: the controller's own."""
    parser.add_argument(
        "--default-service-account",
        default=DEFAULT_SERVICE_ACCOUNT,
        help=f"service account to impersonate when a {kind} names none (default "
        f"{DEFAULT_SERVICE_ACCOUNT!r}, in the object's namespace; an empty value applies such "
        f"a {kind} as the controller itself, for single-tenant clusters only)",
    )


def add_tenant_arguments(parser: argparse.ArgumentParser, *, kind: str, remote: str) -> None:
    """The flags of a controller that applies a tenant's objects (Flux's names and defaults).

    `kind` names what it reconciles (in the help of `--default-service-account`),
    `remote` what a kubeConfig reference is given for ("remote apply").
    """
    parser.add_argument(
        "--requeue-dependency",
        type=duration,
        default=30.0,
        help="how long to wait before looking again at a dependency or source that is not ready",
    )
    no_cross_namespace_refs(parser, help="refuse sources in other namespaces")
    default_service_account(parser, kind=kind)
    switch(
        parser,
        "--insecure-kubeconfig-exec",
        help=f"allow the user.exec section of kubeconfigs given for {remote} (the plugin runs "
        "in the controller's container)",
    )
    switch(
        parser,
        "--insecure-kubeconfig-tls",
        help=f"allow kubeconfigs given for {remote} to disable TLS verification",
    )


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def runtime_namespace() -> str:
    return os.environ.get("RUNTIME_NAMESPACE") or "flux-system"


def watched_namespace(options: argparse.Namespace) -> str | None:
    if options.watch_namespace:
        return str(options.watch_namespace)
    return None if options.watch_all_namespaces else runtime_namespace()
