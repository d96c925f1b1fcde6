"""RFC 3339 as Kubernetes writes it: the one formatter every component uses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Literal

import pytest

from sluice_api.meta import format_time, parse_time

WHOLE = datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC)
FRACTION = datetime(2026, 11, 21, 10, 0, 0, 120000, tzinfo=UTC)
PARIS = timezone(timedelta(hours=1))


@pytest.mark.parametrize(
    ("moment", "fraction", "text"),
    [
        pytest.param(WHOLE, "auto", "2026-11-21T10:00:00Z", id="auto-whole-second"),
        pytest.param(FRACTION, "auto", "2026-11-21T10:00:00.12Z", id="auto-trims-zeros"),
        pytest.param(FRACTION, "none", "2026-11-21T10:00:00Z", id="time-truncates"),
        pytest.param(WHOLE, "micro", "2026-11-21T10:00:00.000000Z", id="microtime-always-six"),
        pytest.param(FRACTION, "micro", "2026-11-21T10:00:00.120000Z", id="microtime"),
        pytest.param(
            datetime(2026, 11, 21, 11, 0, tzinfo=PARIS), "none", "2026-11-21T10:00:00Z", id="utc"
        ),
    ],
)
def test_format_time(
    moment: datetime, fraction: Literal["auto", "none", "micro"], text: str
) -> None:
    assert format_time(moment, fraction=fraction) == text
    kept = moment.replace(microsecond=0) if fraction == "none" else moment
    assert parse_time(text) == kept
