"""Where a controller's CPU goes, by reconcile phase: a sampling profiler.

asyncio interleaves reconciles, so timing a step measures its waits as well
as its work. The kernel's profiling timer (ITIMER_PROF) fires once per
`interval` of CPU the process uses; the handler runs on the event loop's
thread with the frame that was executing, and walks outwards to the first
reconcile step on the stack (`reconcile_build`, `reconcile_apply`...) or the
status write. CPU used while the loop thread waits in the selector (threads
of the default executor, the garbage collector between events) is counted as
`threads`, anything else as `runtime` (informers, the queue, metrics).

Off unless `--profile-phases` is given: the benchmarks turn it on.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Collection, Iterable
from types import FrameType

from opentelemetry.metrics import CallbackOptions, Observation

from sluice_runtime.observing.metrics import meter

_PATCHER = "reconciling/patching.py"


class PhaseSampler:
    def __init__(self, phases: Collection[str], *, interval: float = 0.01) -> None:
        self.phases = frozenset(phases)
        self.interval = interval
        self.samples: Counter[str] = Counter()

    def phase_of(self, frame: FrameType | None) -> str:
        if frame is not None and frame.f_code.co_filename.endswith("selectors.py"):
            return "threads"
        while frame is not None:
            code = frame.f_code
            if code.co_name in self.phases:
                return code.co_name
            if code.co_name == "write" and code.co_filename.endswith(_PATCHER):
                return "status"
            frame = frame.f_back
        return "runtime"

    def _sample(self, signum: int, frame: FrameType | None) -> None:
        self.samples[self.phase_of(frame)] += 1

    def start(self, service: str) -> None:
        signal.signal(signal.SIGPROF, self._sample)
        signal.setitimer(signal.ITIMER_PROF, self.interval, self.interval)

        def observe(_: CallbackOptions) -> Iterable[Observation]:
            for phase, count in list(self.samples.items()):
                yield Observation(count * self.interval, {"phase": phase})

        meter(service).create_observable_counter(
            "sluice_phase_cpu_seconds_total",
            callbacks=[observe],
            unit="s",
            description="CPU used by reconcile phase, sampled (--profile-phases).",
        )

    def stop(self) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, signal.SIG_DFL)
