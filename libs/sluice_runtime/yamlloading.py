"""Reading YAML a tenant wrote: bounded in size and expansion, fast, and off the event loop.

Tenants hand the controllers YAML of their own: a HelmRepository's
index.yaml (up to `--helm-index-max-size`, 50 MiB by default), Chart.yaml,
values files and `valuesFrom` ConfigMaps and Secrets, and what their
ResourceSet templates render. Three things made that YAML a way to stop a
controller for every other tenant, and this module answers each once for
every service:

- Speed. PyYAML's pure-Python loader reads about 50 kB/s of an index, and
  even its libyaml loader spends most of its time in the garbage collector,
  walking the node graph it composes before building values from it (20 s
  for a 21 MiB index shaped like bitnami's). `load` builds values straight
  from libyaml's events instead (3 s for that index), with PyYAML's safe
  schema: the same implicit types, explicit scalar tags and `<<` merge
  keys as `yaml.safe_load`.
- Expansion. An alias repeats the node it names, and whatever later copies,
  merges or serialises the values (a HelmRelease's values going to helm, a
  ResourceSet's objects going to the API server) pays for every repetition:
  a 256-byte values ConfigMap with nested aliases expands to gigabytes.
  While building, every node is counted as often as aliases repeat it, and
  so is the text of every scalar; `YamlLimits` caps both, and a document
  over either is refused before anything copies it (`YamlLimitExceeded`,
  naming the limit). Aliases stay allowed below the caps: real values files
  use anchors and merge keys. An alias inside the node it names (a cycle,
  which no serialiser can write out) is refused.
- The loop. `load_off_loop` and `load_all_off_loop` run the parse in a small
  pool of its own, so a large parse neither stalls the event loop (the
  build is Python code, which gives up the GIL between bytecodes) nor takes
  the default executor's threads from artifact writes; requested work gets
  the pool's twin (lanes.py).

PyYAML's wheels on PyPI carry libyaml; a PyYAML built without it falls back
to its pure-Python parser, with the same results and limits but slower,
and `LIBYAML` says which one runs (a warning is logged when it is the slow one).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml import events as ev

from sluice_runtime import lanes

try:
    from yaml import CSafeLoader as _Loader

    LIBYAML = True
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

    LIBYAML = False
    logging.getLogger(__name__).warning(
        "PyYAML has no libyaml: tenant YAML is parsed in pure Python, several times slower"
    )

MiB = 1 << 20

_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_MERGE = "tag:yaml.org,2002:merge"


@dataclass(frozen=True, kw_only=True)
class YamlLimits:
    """How large a tenant's YAML may be, as read and as its aliases expand it."""

    max_bytes: int
    """The input's size, and the scalar text of the values built (aliases repeat it)."""
    max_nodes: int
    """Scalars, mappings and sequences built, each counted as often as aliases repeat it.
    A node costs the process about 80 bytes once built."""

    def __post_init__(self) -> None:
        if self.max_bytes <= 0 or self.max_nodes <= 0:
            raise ValueError("YAML limits must be positive")


VALUES_LIMITS = YamlLimits(max_bytes=8 * MiB, max_nodes=500_000)
"""Values (files, `values`, `valuesFrom`), Chart.yaml and rendered templates: far above any
chart's values.yaml (the largest public ones are a few hundred kB), far below what fills a
controller's memory."""


YAMLError = yaml.YAMLError
"""What every parse error here is (so callers need not import yaml to catch it)."""


class YamlLimitExceeded(yaml.YAMLError):
    """The YAML, or what its aliases expand it to, is larger than its `YamlLimits` allow."""


class _Budget:
    __slots__ = ("limits", "nodes", "text")

    def __init__(self, limits: YamlLimits) -> None:
        self.limits = limits
        self.nodes = 0
        self.text = 0

    def charge(self, nodes: int, text: int) -> None:
        self.nodes += nodes
        self.text += text
        if self.nodes > self.limits.max_nodes:
            raise YamlLimitExceeded(
                f"YAML expands to more than {self.limits.max_nodes} nodes (the node limit; "
                "each alias counts the nodes it repeats)"
            )
        if self.text > self.limits.max_bytes:
            raise YamlLimitExceeded(
                f"YAML expands to more than {self.limits.max_bytes} bytes of text (the size "
                "limit; each alias counts the text it repeats)"
            )


@dataclass(slots=True)
class _Open:
    """A mapping or sequence being built, and what its anchor must remember at its end."""

    value: dict[Any, Any] | list[Any]
    anchor: str | None
    nodes: int
    text: int
    key: Any = None
    has_key: bool = False
    merges: list[tuple[Any, Any]] | None = None


def _error(problem: str, mark: Any) -> yaml.YAMLError:
    return yaml.constructor.ConstructorError(None, None, problem, mark)


def _scalar(loader: Any, event: Any) -> tuple[Any, bool]:
    """The value of a scalar, and whether it is a merge key (`<<`)."""
    tag = event.tag
    if tag is None or tag == "!":
        tag = loader.resolve(yaml.ScalarNode, event.value, event.implicit)
    if tag == _STR:
        return event.value, False
    if tag == _MERGE:
        return None, True
    constructor = loader.yaml_constructors.get(tag)
    if constructor is None or tag in (_MAP, _SEQ) or tag.endswith((":omap", ":pairs", ":set")):
        raise _error(f"could not determine a constructor for the tag {tag!r}", event.start_mark)
    node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
    try:
        return constructor(loader, node), False
    except yaml.YAMLError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
        # PyYAML's constructors assume the resolver matched the text: an explicit
        # tag on other text (`!!int x`) or a date that does not exist (2020-02-30)
        # fails in int(), datetime() or a regex match. Callers catch YAMLError only.
        raise _error(
            f"the {tag.rsplit(':', 1)[-1]} {event.value[:40]!r} is not valid", event.start_mark
        ) from None


def _collection_tag(event: Any, default: str) -> None:
    if event.tag not in (None, "!", default):
        # !!set, !!omap and application tags: nothing in Kubernetes or Helm reads them.
        raise _error(f"the tag {event.tag!r} is not supported here", event.start_mark)


def _merged(mapping: dict[Any, Any], merges: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """`<<` as PyYAML's SafeConstructor merges: explicit keys win, then earlier merges."""
    out: dict[Any, Any] = {}
    for value, mark in reversed(merges):
        sources = value if isinstance(value, list) else [value]
        for source in reversed(sources):
            if not isinstance(source, dict):
                raise _error("expected a mapping or list of mappings for merging", mark)
            out.update(source)
    out.update(mapping)
    return out


def _documents(data: str | bytes, limits: YamlLimits) -> list[Any]:
    if len(data) > limits.max_bytes:
        raise YamlLimitExceeded(
            f"YAML of {len(data)} bytes is larger than the size limit of {limits.max_bytes} bytes"
        )
    budget = _Budget(limits)
    loader = _Loader(data)
    try:
        documents: list[Any] = []
        anchors: dict[str, tuple[Any, int, int]] = {}
        """Each anchor's value, and the nodes and text an alias to it repeats."""
        stack: list[_Open] = []
        open_anchors: set[str] = set()
        while True:
            # Dispatched on its type below; PyYAML's stubs type events loosely.
            event: Any = loader.get_event()
            kind = type(event)
            value: Any
            if kind is ev.ScalarEvent:
                budget.charge(1, len(event.value))
                value, merge = _scalar(loader, event)
                if merge:
                    value = _MERGE_KEY
                if event.anchor is not None:
                    anchors[event.anchor] = (value, 1, len(event.value))
            elif kind is ev.MappingStartEvent or kind is ev.SequenceStartEvent:
                mapping = kind is ev.MappingStartEvent
                _collection_tag(event, _MAP if mapping else _SEQ)
                budget.charge(1, 0)
                stack.append(_Open({} if mapping else [], event.anchor, budget.nodes, budget.text))
                if event.anchor is not None:
                    open_anchors.add(event.anchor)
                continue
            elif kind is ev.MappingEndEvent or kind is ev.SequenceEndEvent:
                done = stack.pop()
                if done.merges:
                    assert isinstance(done.value, dict)
                    done.value = _merged(done.value, done.merges)
                value = done.value
                if done.anchor is not None:
                    open_anchors.discard(done.anchor)
                    anchors[done.anchor] = (
                        value,
                        budget.nodes - done.nodes + 1,
                        budget.text - done.text,
                    )
            elif kind is ev.AliasEvent:
                if event.anchor in open_anchors:
                    raise _error(
                        f"alias *{event.anchor} is inside the node it names (a cycle)",
                        event.start_mark,
                    )
                if event.anchor not in anchors:
                    raise yaml.composer.ComposerError(
                        None, None, f"found undefined alias {event.anchor!r}", event.start_mark
                    )
                value, nodes, text = anchors[event.anchor]
                budget.charge(nodes, text)
            elif kind is ev.DocumentEndEvent:
                anchors.clear()  # anchors do not outlive their document
                continue
            elif kind is ev.StreamEndEvent:
                return documents
            else:  # stream and document starts
                if kind is ev.DocumentStartEvent:
                    documents.append(None)
                continue
            _place(stack, documents, value, event)
    finally:
        loader.dispose()


class _MergeKey:
    """The `<<` key, told apart from a `<<` string by identity."""


_MERGE_KEY = _MergeKey()


def _place(stack: list[_Open], documents: list[Any], value: Any, event: Any) -> None:
    if value is _MERGE_KEY and not (
        stack and isinstance(stack[-1].value, dict) and not stack[-1].has_key
    ):
        raise _error(f"could not determine a constructor for the tag {_MERGE!r}", event.start_mark)
    if not stack:
        documents[-1] = value
        return
    top = stack[-1]
    if isinstance(top.value, list):
        top.value.append(value)
    elif top.has_key:
        if top.key is _MERGE_KEY:
            if top.merges is None:
                top.merges = []
            top.merges.append((value, event.start_mark))
        else:
            top.value[top.key] = value
        top.key, top.has_key = None, False
    else:
        if isinstance(value, dict | list):
            raise _error("found unhashable key", event.start_mark)
        top.key, top.has_key = value, True


def load(data: str | bytes, *, limits: YamlLimits) -> Any:
    """One YAML document as `yaml.safe_load` reads it (None for an empty stream), bounded.

    Raises yaml.YAMLError: the parse's own errors, and YamlLimitExceeded.
    """
    documents = _documents(data, limits)
    if len(documents) > 1:
        raise yaml.composer.ComposerError(
            "expected a single document in the stream", None, "but found another document", None
        )
    return documents[0] if documents else None


def load_all(data: str | bytes, *, limits: YamlLimits) -> list[Any]:
    """Every document of a YAML stream as `yaml.safe_load_all` reads them, bounded together."""
    return _documents(data, limits)


def load_file(path: Path, *, limits: YamlLimits) -> Any:
    """`load` of a file, read no further than the size limit allows (blocking)."""
    try:
        with path.open("rb") as file:
            data = file.read(limits.max_bytes + 1)
    except OSError as error:
        raise yaml.YAMLError(f"cannot read {path.name}: {error.strerror}") from None
    return load(data, limits=limits)


_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tenant-yaml")
"""Parses wait for each other here, not for (or in the way of) the default executor's work."""


async def off_loop(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Run a parse (or a function that parses) in the tenant-YAML pool, in the caller's lane."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(lanes.executor(_POOL), call)


async def load_off_loop(data: str | bytes, *, limits: YamlLimits) -> Any:
    """`load` in the tenant-YAML pool."""
    return await off_loop(load, data, limits=limits)


async def load_file_off_loop(path: Path, *, limits: YamlLimits) -> Any:
    """`load_file` in the tenant-YAML pool."""
    return await off_loop(load_file, path, limits=limits)


async def load_all_off_loop(data: str | bytes, *, limits: YamlLimits) -> list[Any]:
    """`load_all` in the tenant-YAML pool."""
    result: list[Any] = await off_loop(load_all, data, limits=limits)
    return result
