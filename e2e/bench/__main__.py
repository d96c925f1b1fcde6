"""`python -m e2e.bench <name> [options]`: run one benchmark."""

from __future__ import annotations

import sys

from e2e.bench import (
    cli_startup,
    client_cost,
    idle,
    mttp,
    noop_fetch,
    reaction,
    scale,
    soak,
    source_cost,
    webhook_load,
)

BENCHMARKS = {
    "cli-startup": cli_startup.main,
    "client-cost": client_cost.main,
    "idle": idle.main,
    "noop-fetch": noop_fetch.main,
    "mttp": mttp.main,
    "reaction": reaction.main,
    "scale": scale.main,
    "soak": soak.main,
    "source-cost": source_cost.main,
    "webhook-load": webhook_load.main,
}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in BENCHMARKS:
        names = ", ".join(BENCHMARKS)
        print(f"usage: python -m e2e.bench {{{names}}} [options]", file=sys.stderr)
        raise SystemExit(2)
    BENCHMARKS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
