"""Input sets: what providers export and how a ResourceSet combines them.

Pure functions, no I/O: the provider steps fetch a list (tags, branches, a
service's answer) and hand it here to be filtered, sorted, limited, given
ids and defaults, checked and digested; the ResourceSet steps combine
several providers' exports (Flatten or Permute) before rendering. Keeping
the rules here lets them be tested as a table.

Ids are Flux Operator's: the decimal adler32 of the tag or branch name, so
an app keeps its id (and the objects named after it) as its digest moves.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sluice_api.resourceset import DEFAULT_FILTER_LIMIT, InputFilter
from sluice_runtime.patterns import InvalidPattern, compile_pattern
from sluice_runtime.versions import matching_tags, parse_range, parse_version

Input = dict[str, Any]
MAX_PERMUTATIONS = 10_000
"""The most input sets a Permute may produce; more is refused, never truncated."""


class InputError(ValueError):
    """Input sets that cannot be exported or used; the message names the problem."""


def input_id(text: str) -> str:
    """Flux Operator's id of a tag or branch: its adler32, in decimal."""
    return str(zlib.adler32(text.encode()))


@dataclass(frozen=True)
class NameFilter:
    """`include*`/`exclude*` (RE2) and `semver` of a provider's filter, compiled."""

    include: Any = None
    exclude: Any = None
    semver: Any = None
    limit: int = DEFAULT_FILTER_LIMIT

    @classmethod
    def for_tags(cls, spec: InputFilter | None) -> NameFilter:
        return cls._of(spec, "Tag")

    @classmethod
    def for_branches(cls, spec: InputFilter | None) -> NameFilter:
        return cls._of(spec, "Branch")

    @classmethod
    def _of(cls, spec: InputFilter | None, what: str) -> NameFilter:
        if spec is None:
            return cls()
        include = getattr(spec, f"include_{what.lower()}")
        exclude = getattr(spec, f"exclude_{what.lower()}")
        try:
            semver = parse_range(spec.semver) if spec.semver and what == "Tag" else None
        except ValueError as error:
            raise InputError(f"spec.filter.semver: {error}") from None
        try:
            return cls(
                include=compile_pattern(include, what=f"spec.filter.include{what}")
                if include
                else None,
                exclude=compile_pattern(exclude, what=f"spec.filter.exclude{what}")
                if exclude
                else None,
                semver=semver,
                limit=spec.limit if spec.limit > 0 else DEFAULT_FILTER_LIMIT,
            )
        except InvalidPattern as error:
            raise InputError(str(error)) from None

    def matches(self, name: str) -> bool:
        """Whether `name` passes `include*` and `exclude*`."""
        return (self.include is None or bool(self.include.search(name))) and (
            self.exclude is None or not self.exclude.search(name)
        )

    def select(self, names: Iterable[str]) -> list[str]:
        """The names kept, in export order, at most `limit` of them.

        With `semver`, only versions in range, newest first; without, reverse
        alphabetical order (Flux Operator's), so `limit` keeps the newest-looking.
        """
        kept = [n for n in dict.fromkeys(names) if self.matches(n)]
        if self.semver is not None:
            versions = {n: parse_version(n) for n in matching_tags(self.semver, kept)}
            kept = sorted(versions, key=lambda n: versions[n], reverse=True)  # type: ignore[arg-type,return-value]
        else:
            kept = sorted(kept, reverse=True)
        return kept[: self.limit]


RESULT_KEYS = ("id", "sha", "branch", "tag", "author", "title", "labels")
"""What a Git-service provider exports of each request, branch or tag."""


def skipped(labels: Sequence[str], skip: Sequence[str]) -> bool:
    """Whether a request with `labels` is held back by `spec.skip.labels`: one of them
    present, or one written `!label` absent."""
    return any((s[1:] not in labels) if s.startswith("!") else (s in labels) for s in skip if s)


def restore_skipped(
    found: Sequence[Input], previous: Sequence[Mapping[str, Any]] | None, skip: Sequence[str]
) -> list[Input]:
    """Flux Operator's `skip.labels`: a skipped request keeps what it exported last (its
    environment stays on the old commit), and one never exported before is left out."""
    if not skip:
        return [dict(i) for i in found]
    last = {str(i.get("id")): i for i in previous or ()}
    kept: list[Input] = []
    for item in found:
        if not skipped(item.get("labels") or [], skip):
            kept.append(dict(item))
            continue
        before = last.get(str(item["id"]))
        if before is None:
            continue
        kept.append({**item, **{k: before[k] for k in RESULT_KEYS if k in before}})
    return kept


def with_defaults(
    inputs: Sequence[Mapping[str, Any]], defaults: Mapping[str, Any] | None
) -> list[Input]:
    """Each input set with the keys it lacks taken from `defaults`."""
    return [{**(defaults or {}), **dict(i)} for i in inputs]


def check(inputs: Sequence[Mapping[str, Any]], *, limit: int | None = None) -> None:
    """Refuse input sets a ResourceSet could not tell apart: no id, or an id twice;
    and more sets than `limit`."""
    if limit is not None and len(inputs) > limit:
        raise InputError(
            f"{len(inputs)} input sets exceed the limit of {limit} (spec.filter.limit)"
        )
    seen: set[str] = set()
    for index, item in enumerate(inputs):
        raw = item.get("id")
        if raw is None or raw == "":
            raise InputError(f"input set #{index} has no 'id'")
        ident = str(raw)
        if ident in seen:
            raise InputError(f"input id '{ident}' is exported more than once")
        seen.add(ident)


def revision(inputs: Sequence[Mapping[str, Any]]) -> str:
    """`sha256:<hex>` of the input sets, independent of key order."""
    encoded = json.dumps(list(inputs), sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(encoded).hexdigest()


def provider_key(name: str) -> str:
    """A provider's key in a permuted input set: its name, usable as a template field."""
    return name.replace("-", "_").replace(".", "_")


def flatten(sources: Sequence[tuple[str, Sequence[Input]]]) -> list[Input]:
    """Every set of every source on its own, in order; ids must stay unique."""
    combined = [dict(i) for _, sets in sources for i in sets]
    return combined


def permute(sources: Sequence[tuple[str, Sequence[Input]]]) -> list[Input]:
    """The Cartesian product of the sources' sets, each under its source's key, with an
    `id` of its own (adler32 of the ids combined); refused past MAX_PERMUTATIONS."""
    present = [(name, sets) for name, sets in sources if sets]
    if not present:
        return []
    total = 1
    for _, sets in present:
        total *= len(sets)
        if total > MAX_PERMUTATIONS:
            raise InputError(
                f"the permutation of {len(present)} input sources exceeds "
                f"the limit of {MAX_PERMUTATIONS} input sets"
            )
    keys = [provider_key(name) for name, _ in present]
    if len(set(keys)) != len(keys):
        raise InputError(f"input sources with the same key: {', '.join(sorted(keys))}")
    out: list[Input] = []
    for combo in itertools.product(*(sets for _, sets in present)):
        ids = "-".join(str(s.get("id", "")) for s in combo)
        item: Input = {"id": input_id(ids)}
        item.update({key: dict(s) for key, s in zip(keys, combo, strict=True)})
        out.append(item)
    return out
