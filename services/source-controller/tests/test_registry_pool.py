"""Registry calls in the source-controller's bounded pool: a deadline that names the registry."""

from __future__ import annotations

import time

import pytest

from sluice_runtime.oci import registry as oci
from source_controller import ocirepository


async def test_a_registry_call_past_its_deadline_names_the_registry() -> None:
    """A call queued behind hung ones (every pool thread held) times out before it
    could say where it went; the message must still name the registry."""
    with pytest.raises(oci.RegistryError) as raised:
        await ocirepository.run_bounded(time.sleep, 6, timeout=0.5, host="registry.example:5000")
    assert str(raised.value) == "registry registry.example:5000: operation timed out after 0.5s"
