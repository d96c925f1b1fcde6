"""Where a webhook trial's time goes: the controllers' requested-reconcile timelines, per trial.

The source- and kustomize-controller run with `--trace-requests FILE`
(sluice_runtime.observing.reacting): one JSON line per reconcile that
entered the REQUESTED lane, in wall-clock time. A trial, from the POST (t0)
to the bench seeing the Kustomization applied, is split into:

- the webhook to the source-controller's handler queueing the GitRepository
  (receiver, its requestedAt patch, the informer's delivery);
- the source reconcile: queue wait, each step, the status write;
- the source's status written to the kustomize-controller's handler queueing
  the Kustomization (API watch and informer delivery, including that loop's lag);
- the Kustomization reconcile: queue wait, each step, the status write;
- its status written to the bench's watch seeing it.

Per reconcile also: API requests sent, the time at least one was in flight,
and the event loop's lag while it ran (a sampler's lateness: mean, max, and
the share of the window it was late), and the loop thread's CPU meanwhile;
and its own callbacks in the loop (sluice_runtime.lanes.ReadyLanes): how many
ran, how many bulk callbacks were ready ahead of them (what they would have
queued behind in a single first-come, first-served queue), and the seconds
they waited.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from e2e.bench.common import median, table
from sluice_runtime.kube.client import KubeClient

SOURCE, KUSTOMIZATION = "GitRepository", "Kustomization"


def load(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _first(timelines: list[dict[str, Any]], kind: str, after: float) -> dict[str, Any] | None:
    found = [t for t in timelines if t["kind"] == kind and t["queued"] >= after]
    return min(found, key=lambda t: t["queued"]) if found else None


def _busy(requests: list[list[Any]]) -> tuple[float, int]:
    """Seconds with at least one request in flight (concurrent requests counted once),
    and how many round trips in sequence that took (overlapping requests count as one):
    a load-independent measure of the reconcile's path."""
    total, reach, trips = 0.0, float("-inf"), 0
    for start, seconds, *_ in sorted(requests):
        end = start + seconds
        if start >= reach:
            trips += 1
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total, trips


def _reconcile(prefix: str, timeline: dict[str, Any]) -> dict[str, float]:
    stages = {f"{prefix}: queue wait": timeline["started"] - timeline["queued"]}
    in_steps = 0.0
    for name, start, end in timeline["steps"]:
        label = f"{prefix}: {name.removeprefix('reconcile_')}"
        stages[label] = stages.get(label, 0.0) + end - start
        in_steps += end - start
    stages[f"{prefix}: outside steps"] = timeline["ended"] - timeline["started"] - in_steps
    lag = timeline["lag"]
    busy, trips = _busy(timeline["requests"])
    details = {
        f"{prefix} · API requests": float(len(timeline["requests"])),
        f"{prefix} · API round trips in sequence": float(trips),
        f"{prefix} · API in flight s": busy,
        f"{prefix} · loop lag mean ms": 1000 * lag.get("mean", 0.0),
        f"{prefix} · loop lag max ms": 1000 * lag.get("max", 0.0),
        f"{prefix} · loop late share": lag.get("late_share", 0.0),
        f"{prefix} · loop thread CPU s": timeline["loop_cpu"],
        f"{prefix} · loop wake-ups": float(timeline.get("wakeups", 0)),
        f"{prefix} · bulk callbacks passed": float(timeline.get("bulk_passed", 0)),
        f"{prefix} · wait in ready queue s": timeline.get("ready_wait", 0.0),
    }
    return {**stages, **details}


def _status_written(timeline: dict[str, Any]) -> float:
    ends = [end for name, _, end in timeline["steps"] if name == "status"]
    return ends[-1] if ends else float(timeline["ended"])


def breakdown(
    t0: float, applied: float, timelines: list[dict[str, Any]]
) -> dict[str, float] | None:
    """The stages of one trial from POST at `t0` to the bench seeing it applied
    (both wall clock); None when a timeline is missing (the trace was off)."""
    source = _first(timelines, SOURCE, t0)
    if source is None:
        return None
    ks = _first(timelines, KUSTOMIZATION, source["queued"])
    if ks is None or ks["queued"] > applied:
        return None
    return {
        "webhook → source-controller queued it": source["queued"] - t0,
        **_reconcile("source", source),
        "source status written → kustomize-controller queued it": ks["queued"]
        - _status_written(source),
        **_reconcile("kustomize", ks),
        "kustomize status written → bench saw it": applied - _status_written(ks),
    }


def report(trials: list[dict[str, Any]]) -> str:
    """A table: the stages of the median, p90 and p99 trial (by the figure), the
    median of each stage over all trials, and its mean over the slowest tenth."""
    split = [t for t in trials if t.get("breakdown")]
    if not split:
        return "no trace of requested reconciles (controllers without --trace-requests?)"
    ranked = sorted(split, key=lambda t: t["applied"])

    def at(q: float) -> dict[str, Any]:
        return ranked[min(len(ranked) - 1, round(q * (len(ranked) - 1)))]

    picks = [at(0.5), at(0.9), at(0.99)]
    slowest = ranked[-max(1, len(ranked) // 10) :]
    labels: list[str] = []
    for trial in ranked:
        labels += [k for k in trial["breakdown"] if k not in labels]
    rows: list[list[Any]] = [["webhook → applied (the figure)", *(p["applied"] for p in picks),
                              median([t["applied"] for t in split]),
                              sum(t["applied"] for t in slowest) / len(slowest)]]  # fmt: skip
    for label in labels:
        values = [t["breakdown"].get(label, 0.0) for t in split]
        if all(abs(v) < 0.0005 for v in values):
            continue  # a step that never took a millisecond
        worst = [t["breakdown"].get(label, 0.0) for t in slowest]
        rows.append([label, *(p["breakdown"].get(label, 0.0) for p in picks), median(values),
                     sum(worst) / len(worst)])  # fmt: skip
    headers = ["stage (s unless named)", "median trial", "p90 trial", "p99 trial",
               "median of stage", f"mean, slowest {len(slowest)}"]  # fmt: skip
    return table(headers, rows)


# -- the API server's side of the same requests ----------------------------------

_SERVED = re.compile(r"^apiserver_request_duration_seconds_(sum|count)\{([^}]*)\} ([0-9.e+-]+)$")
WATCHED = {("PATCH", "gitrepositories", "status"): "source status write",
           ("APPLY", "configmaps", ""): "kustomize apply and dry-run"}  # fmt: skip
"""Requests only the trials send (the load has OCIRepositories and no ConfigMaps), so the
server's histogram of them is the trials' alone."""


async def served(client: KubeClient) -> dict[str, tuple[float, float]]:
    """Per WATCHED series: the API server's (seconds summed, count) so far."""
    found: dict[str, tuple[float, float]] = {}
    async for line in client.stream_lines("/metrics"):
        match = _SERVED.match(line)
        if match is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
        what = WATCHED.get((labels.get("verb", ""), labels.get("resource", ""),
                            labels.get("subresource", "")))  # fmt: skip
        if what is None:
            continue
        total, count = found.get(what, (0.0, 0.0))
        value = float(match.group(3))
        found[what] = (total + value, count) if match.group(1) == "sum" else (total, count + value)
    return found


def server_vs_client(
    before: dict[str, tuple[float, float]],
    after: dict[str, tuple[float, float]],
    traced: list[dict[str, Any]],
) -> str:
    """Mean seconds per request as the API server timed it and as the controller waited
    for it: the difference is the client's side (the connection, the loop's lag)."""
    client_side = {
        "source status write": [r[1] for t in traced if t["kind"] == SOURCE
                                for r in t["requests"] if r[5].endswith("/status")],
        "kustomize apply and dry-run": [r[1] for t in traced if t["kind"] == KUSTOMIZATION
                                        for r in t["requests"]
                                        if "/configmaps" in r[5] and r[2] != "get"],
    }  # fmt: skip
    rows = []
    for what, seconds in client_side.items():
        total, count = after.get(what, (0.0, 0.0))
        total -= before.get(what, (0.0, 0.0))[0]
        count -= before.get(what, (0.0, 0.0))[1]
        rows.append([what, f"{total / count * 1000:.1f}" if count else "-", int(count),
                     f"{sum(seconds) / len(seconds) * 1000:.1f}" if seconds else "-",
                     len(seconds)])  # fmt: skip
    headers = ["requests", "server ms (mean)", "n", "controller waited ms (mean)", "n"]
    return table(headers, rows)


def main(argv: list[str] | None = None) -> None:
    """Print the split again from a reaction run's `--out` JSON (loaded trials, else all)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m e2e.bench.timelines")
    parser.add_argument("out", help="the JSON `e2e.bench reaction --out` wrote")
    document = json.loads(Path(parser.parse_args(argv).out).read_text())
    runs = document["runs"]
    for trial in runs["webhook"]:
        trial["breakdown"] = breakdown(trial["posted_at"], trial["applied_at"], runs["timelines"])
    loaded = [t for t in runs["webhook"] if t["under_load"]]
    print(report(loaded or runs["webhook"]))
    print(server_vs_client(*runs["served"], runs["timelines"]))


if __name__ == "__main__":
    main()
