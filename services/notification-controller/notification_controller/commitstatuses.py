"""Commit statuses: the `github` and `gitlab` Provider types.

State `success` for info and `failure` (GitLab `failed`) for error;
`Progressing` events are skipped, as in Flux. The context is
`<kind>/<name>/<first segment of the Provider's UID>`, lowercased, or what the
Provider's `commitStatusExpr` (CEL over `event`, `provider` and `alert`, as
the API gives them) evaluates to, which must be a non-empty string; the
commit is the hash in the `originRevision` or else `revision` metadata.
The expression runs within a cost budget (`sluice_runtime.evaluating`), and
`deliver` builds a request with one in the CEL threads, off the loop.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

from notification_controller.outbound import (
    DeliveryError,
    OutboundRequest,
    Target,
    involved_of,
    json_body,
    metadata_of,
)
from sluice_api.notification import Provider
from sluice_runtime import evaluating

COMMIT_STATUS_TYPES = frozenset({"github", "gitlab"})
PROGRESSING_REASON = "Progressing"
GITHUB_DESCRIPTION_LIMIT = 140
"""GitHub rejects commit status descriptions longer than this."""


def github(target: Target) -> OutboundRequest | None:
    status = _commit_status(target)
    if status is None:
        return None
    sha, state, context, description = status
    scheme, host, path = _repository(target.address)
    owner_repo = path.split("/")
    if len(owner_repo) != 2:
        raise DeliveryError(f"github provider address must be <host>/<owner>/<repo>, at {host}")
    api = "https://api.github.com" if host == "github.com" else f"{scheme}://{host}/api/v3"
    owner, repo = (quote(part, safe="") for part in owner_repo)
    body = {
        "state": "success" if state == "success" else "failure",
        "context": context,
        "description": description[:GITHUB_DESCRIPTION_LIMIT],
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": "2022-11-28",
        "Authorization": f"Bearer {target.token}",
    }
    url = f"{api}/repos/{owner}/{repo}/statuses/{sha}"
    return OutboundRequest("POST", url, json_body(body), headers)


def gitlab(target: Target) -> OutboundRequest | None:
    status = _commit_status(target)
    if status is None:
        return None
    sha, state, context, description = status
    scheme, host, path = _repository(target.address)
    project = quote(path, safe="")
    body = {
        "state": "success" if state == "success" else "failed",
        "name": context,
        "description": description,
    }
    headers = {"Content-Type": "application/json", "PRIVATE-TOKEN": target.token}
    url = f"{scheme}://{host}/api/v4/projects/{project}/statuses/{sha}"
    return OutboundRequest("POST", url, json_body(body), headers)


def commit_status_context(provider: Provider, event: Mapping[str, Any]) -> str:
    """`<kind>/<name>/<first segment of the Provider UID>`, lowercased, as Flux."""
    uid = provider.metadata.uid
    if not uid:
        raise DeliveryError(f"{provider.spec.type} provider has no uid for the status context")
    involved = involved_of(event)
    kind, name = involved.get("kind", ""), involved.get("name", "")
    return f"{kind}/{name}/{uid.split('-')[0]}".lower()


class InvalidExpression(ValueError):
    """A `commitStatusExpr` that does not compile; the message names the field."""


@functools.lru_cache(maxsize=256)
def compile_expression(source: str) -> evaluating.Program:
    """The compiled `commitStatusExpr` (cached: every event to the Provider uses it).

    celpy costs ~7 MiB resident once imported; only a Provider with
    commitStatusExpr needs it, and it is imported with the first."""
    try:
        return evaluating.compile_expression(source)
    except evaluating.InvalidExpression as error:
        raise InvalidExpression(
            f"spec.commitStatusExpr: invalid CEL expression {source!r}: {error}"
        ) from None


def expression_context(source: str, target: Target) -> str:
    """What `commitStatusExpr` gives for this event; DeliveryError naming it otherwise."""
    try:
        program = compile_expression(source)
    except InvalidExpression as error:
        raise DeliveryError(str(error)) from None
    from celpy.adapter import json_to_cel
    from celpy.evaluation import CELEvalError

    activation = {
        "event": json_to_cel(dict(target.event)),
        "provider": json_to_cel(target.provider.to_obj()),
        "alert": json_to_cel(dict(target.alert or {})),
    }
    try:
        value = program.evaluate(activation)
    except CELEvalError as error:
        reason = str(error.args[0]) if error.args else str(error)
        raise DeliveryError(
            f"spec.commitStatusExpr {source!r} cannot be evaluated: {reason[:200]}"
        ) from None
    except evaluating.BudgetExceeded as error:
        raise DeliveryError(f"spec.commitStatusExpr {source!r}: {error}") from None
    # celpy gives a plain str for some string results (concatenation): both are strings.
    if not isinstance(value, str) or not value:
        raise DeliveryError(
            f"spec.commitStatusExpr {source!r} gave {type(value).__name__} "
            f"{str(value)[:60]!r}, not a non-empty string"
        )
    return str(value)


def commit_state(severity: str, reason: str) -> str | None:
    """`success`, `failure`, or None to skip (Progressing), as Flux maps them."""
    if reason == PROGRESSING_REASON:
        return None
    if severity == "info":
        return "success"
    if severity == "error":
        return "failure"
    raise DeliveryError(f"cannot map severity {severity!r} to a commit status")


def commit_sha(revision: str) -> str:
    """The commit hash in a Flux revision (`main@sha1:<sha>`, `sha1:<sha>`, `main/<sha>`)."""
    candidate = revision.strip()
    if "@" in candidate:
        candidate = candidate.rpartition("@")[2]
    elif ":" not in candidate and "/" in candidate:
        candidate = candidate.rpartition("/")[2]  # the legacy `<branch>/<sha>`
    algorithm, _, digest = candidate.rpartition(":")
    if algorithm not in ("", "sha1", "sha256") or not _HEX_COMMIT.fullmatch(digest):
        raise DeliveryError("cannot find a commit hash in the event's revision")
    return digest.lower()


def describe_reason(reason: str) -> str:
    """`ReconciliationSucceeded` → `reconciliation succeeded`, as Flux splits camel case."""
    words = _CAMEL_WORDS.findall(reason)
    return " ".join(words).lower() if words else reason.lower()


def _commit_status(target: Target) -> tuple[str, str, str, str] | None:
    if not target.token:
        raise DeliveryError(f"{target.provider.spec.type} provider needs a token")
    event = target.event
    metadata = metadata_of(event)
    revision = metadata.get("originRevision") or metadata.get("revision")
    if not revision:
        return None
    reason = str(event.get("reason", ""))
    state = commit_state(str(event.get("severity", "")), reason)
    if state is None:
        return None
    expression = target.provider.spec.commit_status_expr
    context = (
        expression_context(expression, target)
        if expression
        else commit_status_context(target.provider, event)
    )
    return commit_sha(revision), state, context, describe_reason(reason)


_HEX_COMMIT = re.compile(r"[0-9a-fA-F]{40}|[0-9a-fA-F]{64}")
_CAMEL_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def _repository(address: str) -> tuple[str, str, str]:
    """(scheme, host, `owner/repo` path without `.git`) of a Git repository address."""
    text = address.strip()
    scp = re.fullmatch(r"(?:[^@/]+@)?([^:/]+):(?!//)(.+)", text)
    if scp and "://" not in text:
        scheme, host, path = "https", scp.group(1), scp.group(2)
    else:
        parts = urlsplit(text)
        scheme = "https" if parts.scheme in ("ssh", "git", "") else parts.scheme
        host = parts.hostname or ""
        try:
            port = parts.port
        except ValueError:
            raise DeliveryError("the provider address has an invalid port") from None
        if port and parts.scheme in ("http", "https"):
            host = f"{host}:{port}"
        path = parts.path
    path = path.strip("/").removesuffix(".git")
    if not host or not path:
        raise DeliveryError("the provider address is not a Git repository URL")
    return scheme, host, path
