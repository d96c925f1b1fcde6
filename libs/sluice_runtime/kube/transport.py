"""Load only the transport half of kubernetes-asyncio.

Importing `kubernetes_asyncio.client` runs a package `__init__` that loads
every generated model and API class, about 60 MiB per process, more than
the rest of a controller together. Sluice uses the library for what it is
best at, configuration loading (kubeconfig, exec plugins, in-cluster
tokens) and its HTTP transport, and never its generated types. So, when
nothing has imported the library yet, its packages are registered as plain
namespaces and only the modules we use are loaded; the config loader finds
`ApiClient` and `Configuration` where it expects them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any


def _register(name: str, path: Path | None) -> types.ModuleType:
    module = types.ModuleType(name)
    if path is not None:
        module.__path__ = [str(path)]
    sys.modules[name] = module
    return module


def _load() -> tuple[Any, Any]:
    if "kubernetes_asyncio.client" not in sys.modules:
        spec = importlib.util.find_spec("kubernetes_asyncio")
        if spec is None or spec.origin is None:
            raise ImportError("kubernetes-asyncio is not installed")
        root = Path(spec.origin).parent
        package = _register("kubernetes_asyncio", root)
        client = _register("kubernetes_asyncio.client", root / "client")
        # api_client imports the models package; deserializing into models is
        # the one thing we never ask of it.
        _register("kubernetes_asyncio.client.models", None)
        configuration = importlib.import_module("kubernetes_asyncio.client.configuration")
        api_client = importlib.import_module("kubernetes_asyncio.client.api_client")
        exceptions = importlib.import_module("kubernetes_asyncio.client.exceptions")
        client.Configuration = configuration.Configuration  # type: ignore[attr-defined]
        client.ApiClient = api_client.ApiClient  # type: ignore[attr-defined]
        client.ApiException = exceptions.ApiException  # type: ignore[attr-defined]
        package.client = client  # type: ignore[attr-defined]
    client = sys.modules["kubernetes_asyncio.client"]
    config = importlib.import_module("kubernetes_asyncio.config")
    return client, config


k8s_client, k8s_config = _load()
