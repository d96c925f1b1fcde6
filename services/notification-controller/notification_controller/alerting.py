"""Which Alerts an event is for, and the event each Alert's Provider receives.

Pure functions over an Alert and the event JSON controllers POST (see
`sluice_runtime.recording`), following Flux's event server:

- `matches`: a suspended Alert never matches; the event must match one of the
  `eventSources` (same namespace — the Alert's own when the source names
  none —, same kind, name equal or `*`, severity allowed by
  `eventSeverity`, and `matchLabels` against the live object's labels);
  then its message must match one `inclusionList` regex when there is a list,
  and no `exclusionList` regex (exclusion wins). Regexes are searched, not
  anchored, as Go's `regexp.Match`, and in RE2 syntax (linear time, see
  `sluice_runtime.patterns`); one that does not compile matches nothing
  (`invalid_patterns` lists them so the Alert's reconcile can stall on them).
- `enrich`: the event as the Provider sees it. Its metadata is combined the
  way Flux's RFC 0008 orders it, lowest precedence first: keys under
  `event.toolkit.fluxcd.io/` (from the object's annotations), the Alert's
  `eventMetadata`, the Alert's `summary` as `summary`, then keys under the
  involved object's API group — so the event's own values win over the
  Alert's. Prefixes are stripped and other keys dropped; the internal
  `<group>/token` never leaves, nor does any URL's `user:password@`.

The label lookup is a parameter because only the controller has the cache;
`--no-cross-namespace-refs` is the controller's check too, as in Flux.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping
from typing import Any

from sluice_api.notification import Alert, CrossNamespaceObjectReference
from sluice_runtime.patterns import InvalidPattern, Pattern, compile_pattern
from sluice_runtime.redacting import redact_urls

EVENT_GROUP = "event.toolkit.fluxcd.io"
"""Metadata under this prefix comes from the involved object's annotations."""

SUMMARY_KEY = "summary"
TOKEN_KEY = "token"  # noqa: S105 - a metadata key, not a secret

LabelsOf = Callable[[Mapping[str, Any]], Mapping[str, str] | None]
"""The live labels of an event's involvedObject; None when it cannot be found."""


def matches(alert: Alert, event: Mapping[str, Any], *, labels_of: LabelsOf) -> bool:
    """Whether the Alert forwards this event."""
    spec = alert.spec
    if spec.suspend:
        return False
    if not any(_source_matches(source, alert, event, labels_of) for source in spec.event_sources):
        return False
    message = str(event.get("message", ""))
    if spec.inclusion_list and not _any_search(spec.inclusion_list, message):
        return False
    return not (spec.exclusion_list and _any_search(spec.exclusion_list, message))


def enrich(alert: Alert, event: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the event with its metadata combined for this Alert's Provider,
    and any `user:password@` in its message or metadata redacted."""
    notification = copy.deepcopy(dict(event))
    if isinstance(notification.get("message"), str):
        notification["message"] = redact_urls(notification["message"])
    metadata, _ = _combine(alert, event)
    if metadata:
        notification["metadata"] = {key: redact_urls(value) for key, value in metadata.items()}
    elif isinstance(notification.get("metadata"), dict):
        # Flux leaves metadata it could not sort as it came, minus the token.
        notification["metadata"].pop(_prefixed(_group(event), TOKEN_KEY), None)
    return notification


def metadata_conflicts(alert: Alert, event: Mapping[str, Any]) -> list[str]:
    """Metadata keys set by more than one source, for a warning on the Alert."""
    _, conflicts = _combine(alert, event)
    return conflicts


def invalid_patterns(alert: Alert) -> list[InvalidPattern]:
    """The Alert's inclusion and exclusion regexes that do not compile, each naming its field."""
    lists = (
        ("spec.inclusionList", alert.spec.inclusion_list),
        ("spec.exclusionList", alert.spec.exclusion_list),
    )
    errors: list[InvalidPattern] = []
    for field, patterns in lists:
        for index, pattern in enumerate(patterns or ()):
            try:
                compile_pattern(pattern, what=f"{field}[{index}]")
            except InvalidPattern as error:
                errors.append(error)
    return errors


def involved_group(event: Mapping[str, Any]) -> str:
    """The API group of the event's involved object ("" for the core group)."""
    return _group(event)


# Matching -----------------------------------------------------------------------


def _source_matches(
    source: CrossNamespaceObjectReference,
    alert: Alert,
    event: Mapping[str, Any],
    labels_of: LabelsOf,
) -> bool:
    involved = _involved(event)
    namespace = source.namespace or alert.metadata.namespace
    if involved.get("namespace") != namespace or involved.get("kind") != source.kind:
        return False
    severity = alert.spec.event_severity
    if severity != "info" and event.get("severity") != severity:
        return False
    if source.name != "*" and source.name != involved.get("name"):
        return False
    if source.match_labels is None:
        return True
    labels = labels_of(involved)
    if labels is None:
        return False
    return all(labels.get(key) == value for key, value in source.match_labels.items())


def _any_search(patterns: list[str], message: str) -> bool:
    for pattern in patterns:
        compiled = _compiled(pattern)
        if compiled is not None and compiled.search(message):
            return True
    return False


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Pattern | None:
    # Every event is matched against every Alert's lists: compile each pattern once.
    try:
        return compile_pattern(pattern, what="an Alert's inclusionList or exclusionList")
    except InvalidPattern:
        return None


# Metadata ----------------------------------------------------------------------


def _combine(alert: Alert, event: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
    raw = event.get("metadata")
    original: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    group = _group(event)
    token_key = _prefixed(group, TOKEN_KEY)
    sources: dict[str, int] = {}
    combined: dict[str, str] = {}

    def put(key: str, value: Any) -> None:
        combined[key] = str(value)
        sources[key] = sources.get(key, 0) + 1

    for key, value in original.items():
        if key.startswith(EVENT_GROUP + "/"):
            put(key.removeprefix(EVENT_GROUP + "/"), value)
    for key, value in (alert.spec.event_metadata or {}).items():
        put(key, value)
    if alert.spec.summary:
        put(SUMMARY_KEY, alert.spec.summary)
    for key, value in original.items():
        if key.startswith(group + "/") and key != token_key:
            put(key.removeprefix(group + "/"), value)
    return combined, sorted(key for key, count in sources.items() if count > 1)


def _involved(event: Mapping[str, Any]) -> Mapping[str, Any]:
    involved = event.get("involvedObject")
    return involved if isinstance(involved, Mapping) else {}


def _group(event: Mapping[str, Any]) -> str:
    api_version = str(_involved(event).get("apiVersion", ""))
    return api_version.rpartition("/")[0]


def _prefixed(group: str, key: str) -> str:
    return f"{group}/{key}"
