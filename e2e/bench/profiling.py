"""Where the minute goes: a per-phase profile of a benchmark run.

The controllers run with `--profile-phases`; after a run their metrics say,
per reconcile step, the wall time spent in it (summed over every reconcile,
so concurrent reconciles add up: "reconcile-seconds"), the CPU it used
(sampled by the kernel's profiling timer), and the API requests it sent by
verb with the time spent waiting for their answers; plus the time keys
waited in the work queue. `/proc` adds each process's CPU and its children's
(the kustomize build runs `kubectl kustomize`).

The ceilings Sluice's apply throughput is compared to (raw SSA, and the
dry-run promise's floor) are measured by `ceilings`.
"""

from __future__ import annotations

import re
import urllib.request
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import yaml

from e2e.fleet import Controller
from sluice_envtest.measuring import cpu_times
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import ResourceType

_SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? ([0-9.e+-]+|NaN)$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def scrape(controller: Controller) -> dict[str, list[tuple[dict[str, str], float]]]:
    url = f"http://127.0.0.1:{controller.port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    found: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for match in _SERIES.finditer(text):
        labels = dict(_LABEL.findall(match.group(2) or ""))
        found[match.group(1)].append((labels, float(match.group(3))))
    return found


def cpu_seconds(controller: Controller) -> tuple[float, float]:
    """The process's own CPU and its waited-for children's, in seconds."""
    return cpu_times(controller.proc.pid)


@dataclass
class PhaseRow:
    controller: str
    phase: str
    wall: float = 0.0
    cpu: float = 0.0
    requests: dict[str, float] = field(default_factory=dict)
    request_seconds: float = 0.0


@dataclass
class Profile:
    rows: list[PhaseRow]
    queue_wait: dict[str, float]
    """Seconds keys waited in each controller's queue, summed."""
    process_cpu: dict[str, tuple[float, float]]
    """Per controller: (own CPU, children's CPU) in seconds."""

    def requests_by_verb(self, controller: str) -> dict[str, float]:
        total: dict[str, float] = defaultdict(float)
        for row in self.rows:
            if row.controller == controller:
                for verb, count in row.requests.items():
                    total[verb] += count
        return dict(total)

    def as_json(self) -> dict[str, Any]:
        return {
            "phases": [row.__dict__ for row in self.rows],
            "queue_wait_seconds": self.queue_wait,
            "process_cpu_seconds": {k: {"own": v[0], "children": v[1]} for k, v in self.process_cpu.items()},
        }  # fmt: skip


def profile(controllers: dict[str, Controller]) -> Profile:
    rows: list[PhaseRow] = []
    queue_wait: dict[str, float] = {}
    process_cpu: dict[str, tuple[float, float]] = {}
    for name, controller in controllers.items():
        metrics = scrape(controller)
        by_phase: dict[str, PhaseRow] = {}

        def row(phase: str, name: str = name, by_phase: dict[str, PhaseRow] = by_phase) -> PhaseRow:
            return by_phase.setdefault(phase, PhaseRow(name, phase))

        for labels, value in metrics.get("sluice_step_seconds_total", []):
            row(labels.get("step", "?")).wall += value
        for labels, value in metrics.get("sluice_phase_cpu_seconds_total", []):
            row(labels.get("phase", "?")).cpu += value
        for labels, value in metrics.get("sluice_api_requests_total", []):
            entry = row(labels.get("phase", "?"))
            verb = labels.get("verb", "?")
            entry.requests[verb] = entry.requests.get(verb, 0.0) + value
        for labels, value in metrics.get("sluice_api_request_seconds_total", []):
            row(labels.get("phase", "?")).request_seconds += value
        queue_wait[name] = sum(
            v for _, v in metrics.get("workqueue_queue_duration_seconds_sum", [])
        )
        process_cpu[name] = cpu_seconds(controller)
        rows += sorted(by_phase.values(), key=lambda r: -(r.wall + r.cpu))
    return Profile(rows, queue_wait, process_cpu)


def profile_table(result: Profile, apps: int) -> tuple[list[str], list[list[Any]]]:
    headers = ["controller", "phase", "wall (reconcile-s)", "CPU s", "requests/app", "API wait s"]
    lines: list[list[Any]] = []
    for r in result.rows:
        per_app = ", ".join(
            f"{verb} {count / apps:.2f}" for verb, count in sorted(r.requests.items())
        )
        lines.append([r.controller, r.phase, f"{r.wall:.1f}", f"{r.cpu:.1f}", per_app or "-",
                      f"{r.request_seconds:.1f}"])  # fmt: skip
    for name, waited in result.queue_wait.items():
        lines.append([name, "queue wait", f"{waited:.1f}", "-", "-", "-"])
    for name, (own, children) in result.process_cpu.items():
        lines.append([name, "process CPU (own / children)", "-", f"{own:.1f} / {children:.1f}", "-", "-"])  # fmt: skip
    return headers, lines


async def apply_window(
    client: KubeClient, namespace: str, kinds: Iterable[ResourceType], manager: str
) -> tuple[datetime, datetime, int]:
    """When `manager` first and last server-side-applied an object in `namespace`
    (as the objects' managedFields record it, to the second), and how many it
    applied: the span its applies took, without the source fetches and health
    waits that the end-to-end MTTP figure also contains."""
    times: list[datetime] = []
    for rt in kinds:
        for obj in (await client.list(rt, namespace=namespace, metadata_only=True)).items:
            for entry in obj["metadata"].get("managedFields") or []:
                if entry.get("manager") == manager and entry.get("operation") == "Apply":
                    times.append(datetime.fromisoformat(entry["time"].replace("Z", "+00:00")))
    if not times:
        raise RuntimeError(f"no object in {namespace} was applied by {manager}")
    return min(times), max(times), len(times)


def render(app: str, apps: int) -> list[dict[str, Any]]:
    """The objects the controllers will apply for `apps` apps (post-build substituted)."""
    objects: list[dict[str, Any]] = []
    for index in range(apps):
        text = app.replace("${INDEX}", f"{index}app").replace("${MCPU}", "1m")
        objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects
