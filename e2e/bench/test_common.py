"""Work beside a benchmark series ends with the series, while what it uses is still there."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from e2e.bench.common import in_background


class ClientClosed(Exception):
    """What the load's next API call raises once the client is closed."""


@pytest.mark.parametrize(
    ("fails_early", "expected"),
    [
        pytest.param(False, "cancelled", id="still running when the series ends"),
        pytest.param(True, "reported", id="failed before the series ended"),
    ],
)
async def test_background_work_ends_before_the_client_it_uses_closes(
    fails_early: bool, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    client_open = True

    async def load() -> None:
        while True:
            if not client_open:
                raise ClientClosed("the control plane is gone")
            if fails_early:
                raise RuntimeError("Kustomizations not ready")
            await asyncio.sleep(0)

    async with contextlib.AsyncExitStack() as stack:

        def close_client() -> None:
            nonlocal client_open
            client_open = False

        stack.callback(close_client)  # entered first, so closed last
        task = in_background(stack, load(), name="load")
        for _ in range(5):
            await asyncio.sleep(0)  # the series runs
    assert task.done()
    outcome = "cancelled" if task.cancelled() else "reported"
    assert outcome == expected
    printed = capsys.readouterr().out
    if expected == "reported":
        assert "load failed: RuntimeError('Kustomizations not ready')" in printed
    assert "ClientClosed" not in printed
