"""ResourceSetInputProvider: list a source, export input sets for ResourceSets.

STEPS: spec → export → status.

- spec: `fluxcd.controlplane.io/reconcile: disabled` stops here; a type or
  field this version does not build stalls, naming it.
- export: asks the source (an OCI repository's tags with their digests, a Git
  service's pull requests, branches or tags (`gitservices.py`), the spec's own
  values, an HTTP service's JSON) and turns the answer into input sets
  (`inputs.py`: filter, ids, skip, defaults, limit, unique ids).
- status: `exportedInputs` and `lastExportedRevision` change only when an
  export succeeds. A registry or service that cannot be reached fails the
  reconcile and keeps the last exported inputs: an outage must never look
  like every tag being deleted, which would uninstall every app. A Git
  service's rate limit is honoured: the next attempt waits for its reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import shutil
import ssl
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from resourceset_controller import gitservices, inputs, scheduling, timing
from resourceset_controller.gitservices import Listing
from resourceset_controller.inputs import Input, InputError, NameFilter
from sluice_api.meta import RECONCILE_REQUESTED_AT_ANNOTATION
from sluice_api.resourceset import (
    DEFAULT_FILTER_LIMIT,
    NextSchedule,
    ResourceSetInputProvider,
    ResourceSetReason,
)
from sluice_runtime.git import client as gitclient
from sluice_runtime.kube.secrets import SecretError, require, secret_data
from sluice_runtime.oci import registry as oci
from sluice_runtime.reconciling.errors import Stalling, StepError
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import ReconcileContext, Result, done, step
from sluice_runtime.redacting import redact_url

Reason = ResourceSetReason
OCI_TYPES = ("OCIArtifactTag", "OCIRepositoryTag")
GIT_TYPES = ("GitBranch", "GitTag")
SERVICE_TYPES = tuple(gitservices.TYPES)
REQUEST_TYPES = tuple(t for t, (_, what) in gitservices.TYPES.items() if what is Listing.REQUESTS)
TAG_TYPES = ("GitTag", *(t for t, (_, what) in gitservices.TYPES.items() if what is Listing.TAGS))
BUILT_TYPES = (*OCI_TYPES, *GIT_TYPES, *SERVICE_TYPES, "Static", "ExternalService")
GITHUB_APP_KEYS = ("githubAppID", "githubAppInstallationID", "githubAppPrivateKey")
MAX_SERVICE_BODY = 4 << 20
"""The most an ExternalService may answer; a service is not trusted to stop."""
HINTS = oci.Hints(
    tls="a plain-HTTP registry needs spec.insecure: true, a private CA spec.certSecretRef",
    credentials="spec.secretRef",
)
_REGISTRY_THREADS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rsip-registry")


@dataclass
class Services:
    """What provider steps share across reconciles."""

    session: aiohttp.ClientSession
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    registry_threads: ThreadPoolExecutor = field(default_factory=lambda: _REGISTRY_THREADS)


@dataclass(kw_only=True)
class ProviderContext(ReconcileContext[ResourceSetInputProvider]):
    services: Services
    exported: list[Input] = field(default_factory=list)
    wake_at: float | None = None
    """Seconds until the next schedule tick, when the provider has a schedule."""

    @property
    def timeout(self) -> float:
        return timing.timeout(self.obj.metadata.annotations, default=120.0)


# -- 1. spec -------------------------------------------------------------------


def unsupported(provider: ResourceSetInputProvider) -> str | None:
    """What of this provider's spec Sluice does not build, by its field; None when all is."""
    spec = provider.spec
    if spec.type not in BUILT_TYPES:
        return f"spec.type '{spec.type}' is not supported by this version of Sluice"
    if spec.service_account_name:
        return (
            "spec.serviceAccountName (cloud workload identity) is not supported by this "
            "version of Sluice; use spec.secretRef"
        )
    if spec.skip is not None and spec.skip.labels and spec.type not in REQUEST_TYPES:
        return f"spec.skip.labels do not apply to type '{spec.type}'"
    if spec.filter is not None and spec.filter.labels and spec.type not in REQUEST_TYPES:
        return f"spec.filter.labels do not apply to type '{spec.type}'"
    if (
        spec.filter is not None
        and spec.filter.semver
        and (spec.type in REQUEST_TYPES or spec.type.endswith("Branch"))
    ):
        return f"spec.filter.semver does not apply to type '{spec.type}'"
    if spec.type == "Static" and spec.url:
        return "spec.url must be empty when spec.type is 'Static'"
    if spec.type != "Static" and not spec.url:
        return "spec.url must not be empty when spec.type is not 'Static'"
    if spec.type in OCI_TYPES and not (spec.url or "").startswith("oci://"):
        return "spec.url must start with 'oci://' when spec.type is an OCI provider"
    if spec.type in GIT_TYPES and not (spec.url or "").startswith(
        ("http://", "https://", "ssh://")
    ):
        return f"spec.url must start with 'http://', 'https://' or 'ssh://' for {spec.type}"
    if spec.type in GIT_TYPES and spec.insecure:
        return f"spec.insecure does not apply to {spec.type}"
    if spec.type in SERVICE_TYPES:
        if not (spec.url or "").startswith(("http://", "https://")):
            return f"spec.url must start with 'http://' or 'https://' for {spec.type}"
        if spec.insecure:
            return (
                "spec.insecure can only be set when spec.type is 'ExternalService' "
                "or 'OCIArtifactTag'"
            )
    if spec.type == "ExternalService":
        url = spec.url or ""
        if not url.startswith(("http://", "https://")):
            return "spec.url must start with 'http://' or 'https://' for an ExternalService"
        if url.startswith("http://") and not spec.insecure:
            return "spec.url must use 'https://' unless spec.insecure is true"
    return None


@step()
async def reconcile_spec(ctx: ProviderContext) -> Result | None:
    if timing.disabled(ctx.obj.metadata.annotations):
        ctx.ready_reason = Reason.RECONCILIATION_DISABLED
        ctx.ready_message = "Reconciliation is disabled"
        return done(requeue_after=timing.DISABLED_RECHECK)
    problem = unsupported(ctx.obj)
    if problem is not None:
        raise Stalling(Reason.INVALID_SPEC, problem)
    return _schedule(ctx)


def _schedule(ctx: ProviderContext) -> Result | None:
    """Outside every schedule window the source is not listed; a manual request
    (`reconcile.fluxcd.io/requestedAt`, a Receiver) runs it anyway."""
    schedules = ctx.obj.spec.schedule
    status = ctx.obj.status
    if not schedules:
        status.next_schedule = None
        return None
    now = ctx.services.clock()
    try:
        decision = scheduling.decide(schedules, now)
    except scheduling.InvalidSchedule as error:
        raise Stalling(Reason.INVALID_SPEC, str(error)) from None
    when = decision.next_tick.strftime("%Y-%m-%dT%H:%M:%SZ")
    status.next_schedule = NextSchedule.model_validate(
        {**decision.next_schedule.model_dump(by_alias=True), "when": when}
    )
    ctx.wake_at = max((decision.next_tick - now).total_seconds(), 1.0)
    requested = (ctx.obj.metadata.annotations or {}).get(RECONCILE_REQUESTED_AT_ANNOTATION)
    handled = (ctx.raw.get("status") or {}).get("lastHandledReconcileAt")
    if decision.run or (requested and requested != handled):
        return None
    ctx.ready_reason = Reason.RECONCILIATION_SUCCEEDED
    ctx.ready_message = f"Waiting for the next schedule at {when}"
    return done(requeue_after=ctx.wake_at)


# -- 2. export -------------------------------------------------------------------


@step()
async def reconcile_export(ctx: ProviderContext) -> Result | None:
    spec = ctx.obj.spec
    try:
        if spec.type in OCI_TYPES:
            found = await _oci_tags(ctx)
        elif spec.type == "ExternalService":
            found = await _external_service(ctx)
        elif spec.type in GIT_TYPES:
            found = await _git_refs(ctx)
        elif spec.type in SERVICE_TYPES:
            found = await _git_service(ctx)
        else:
            found = [{"id": inputs.input_id(ctx.obj.metadata.uid or ctx.obj.key)}]
        exported = inputs.with_defaults(found, spec.default_values)
        inputs.check(exported)
    except InputError as error:
        raise Stalling(Reason.INVALID_EXPORTED_INPUTS, str(error)) from None
    ctx.exported = exported
    return None


async def _oci_tags(ctx: ProviderContext) -> list[Input]:
    """One set per kept tag: `{id, tag, digest}`, digest of the tag's manifest now."""
    spec = ctx.obj.spec
    select = NameFilter.for_tags(spec.filter)
    try:
        url = oci.OCIURL.parse(spec.url or "")
    except ValueError as error:
        raise Stalling(Reason.INVALID_SPEC, str(error)) from None
    registry = await _registry(ctx, url)
    loop = asyncio.get_running_loop()

    async def call(fn: Callable[[], Any]) -> Any:
        future = loop.run_in_executor(ctx.services.registry_threads, fn)
        try:
            return await asyncio.wait_for(future, ctx.timeout)
        except TimeoutError:
            raise oci.RegistryError(
                f"registry operation timed out after {ctx.timeout:g}s"
            ) from None

    try:
        tags = select.select(await call(registry.list_tags))
        manifests = await asyncio.gather(
            *(call(functools.partial(registry.manifest, tag)) for tag in tags)
        )
    except oci.RegistryError as error:
        # Retried at the interval; the last exported inputs stay as they are.
        raise StepError(Reason.RECONCILIATION_FAILED, str(error)) from None
    return [
        {"id": inputs.input_id(tag), "tag": tag, "digest": manifest.digest}
        for tag, manifest in zip(tags, manifests, strict=True)
    ]


async def _git_refs(ctx: ProviderContext) -> list[Input]:
    """`GitBranch`: `{id, branch, sha}` per kept branch; `GitTag`: `{id, tag, sha}` per
    kept tag (annotated tags peeled to their commit), from one ls-remote."""
    spec = ctx.obj.spec
    url = spec.url or ""
    branches = spec.type == "GitBranch"
    select = NameFilter.for_branches(spec.filter) if branches else NameFilter.for_tags(spec.filter)
    auth = gitclient.GitAuth()
    if spec.secret_ref is not None:
        name = spec.secret_ref.name
        try:
            data = await secret_data(ctx.client, ctx.obj.namespace, name)
            auth = gitclient.auth_from_secret(data, secret=f"{ctx.obj.namespace}/{name}")
        except SecretError as error:
            raise StepError(Reason.RECONCILIATION_FAILED, str(error)) from None
    try:
        refs = await gitclient.ls_remote(url, auth, timeout=ctx.timeout)
    except gitclient.GitError as error:
        # Retried at the interval; the last exported inputs stay as they are.
        raise StepError(
            Reason.RECONCILIATION_FAILED, f"listing {redact_url(url)} failed: {error}"
        ) from None
    prefix = "refs/heads/" if branches else "refs/tags/"
    named = {ref.removeprefix(prefix): sha for ref, sha in refs.items() if ref.startswith(prefix)}
    key = "branch" if branches else "tag"
    return [
        {"id": inputs.input_id(name), key: name, "sha": named[name]}
        for name in select.select(named)
    ]


async def _git_service(ctx: ProviderContext) -> list[Input]:
    """Flux Operator's Git-service providers: per open request `{id, sha, branch, author,
    title, labels}` (id: the request's number), per branch `{id, sha, branch}`, per tag
    `{id, sha, tag}` (id: adler32 of the name). Requests and branches keep the service's
    order and stop at `filter.limit` without asking for further pages; tags are all
    listed, then filtered, sorted and limited as for OCI tags."""
    spec = ctx.obj.spec
    service, listing = gitservices.TYPES[spec.type]
    try:
        repo = gitservices.Repository.parse(service, spec.url or "")
    except ValueError as error:
        raise Stalling(Reason.INVALID_SPEC, str(error)) from None
    select = (
        NameFilter.for_tags(spec.filter)
        if listing is Listing.TAGS
        else NameFilter.for_branches(spec.filter)
    )
    labels = list(spec.filter.labels or []) if spec.filter is not None else []
    try:
        token = await _service_token(ctx)
        tls = await _tls_context(ctx)
    except SecretError as error:
        raise StepError(Reason.RECONCILIATION_FAILED, str(error)) from None
    kept: list[gitservices.Item] = []
    tags: dict[str, gitservices.Item] = {}
    listed = gitservices.pages(
        ctx.services.session, repo, listing, token=token, tls=tls,
        now=ctx.services.clock, labels=labels,
    )  # fmt: skip
    try:
        async with asyncio.timeout(ctx.timeout), contextlib.aclosing(listed):
            async for page in listed:
                for item in page:
                    if listing is Listing.TAGS:
                        tags[item.name] = item  # a name given twice: its last answer
                    elif select.matches(item.branch or item.name) and all(
                        label in item.labels for label in labels
                    ):
                        kept.append(item)
                if len(kept) >= select.limit:
                    break
    except gitservices.RateLimited as error:
        # Asked again at the reset, not at the backoff; the last inputs stay.
        raise StepError(
            Reason.RECONCILIATION_FAILED, str(error), requeue_after=error.wait
        ) from None
    except gitservices.ServiceError as error:
        raise StepError(Reason.RECONCILIATION_FAILED, str(error)) from None
    except TimeoutError:
        raise StepError(
            Reason.RECONCILIATION_FAILED,
            f"listing {listing} of '{repo.name}' timed out after {ctx.timeout:g}s",
        ) from None
    if listing is Listing.TAGS:
        return [
            {"id": inputs.input_id(name), "sha": tags[name].sha, "tag": name}
            for name in select.select(tags)
        ]
    if listing is Listing.BRANCHES:
        return [
            {"id": inputs.input_id(item.name), "sha": item.sha, "branch": item.name}
            for item in kept[: select.limit]
        ]
    found = [_request_input(item) for item in kept[: select.limit]]
    skip = list(spec.skip.labels or []) if spec.skip is not None else []
    return inputs.restore_skipped(found, ctx.obj.status.exported_inputs, skip)


def _request_input(item: gitservices.Item) -> Input:
    """A request's input set; empty author, title and labels are left out, as Flux
    Operator leaves them."""
    found: Input = {"id": item.name, "sha": item.sha, "branch": item.branch}
    if item.author:
        found["author"] = item.author
    if item.title:
        found["title"] = item.title
    if item.labels:
        found["labels"] = list(item.labels)
    return found


async def _service_token(ctx: ProviderContext) -> str | None:
    """The token of `spec.secretRef`: its `password`, next to a `username`, as Flux
    Operator reads it. GitHub App keys are refused by name."""
    spec = ctx.obj.spec
    if spec.secret_ref is None:
        return None
    name = f"{ctx.obj.namespace}/{spec.secret_ref.name}"
    data = await secret_data(ctx.client, ctx.obj.namespace, spec.secret_ref.name)
    if any(key in data for key in GITHUB_APP_KEYS):
        raise SecretError(
            f"secret '{name}': GitHub App credentials (githubAppID) are not supported by "
            "this version of Sluice; use 'username' and 'password' (a token)"
        )
    require(data, "username", "password", secret=name)
    return data["password"].strip()


async def _tls_context(ctx: ProviderContext) -> ssl.SSLContext | bool:
    """Verification against the system's CAs, or `spec.certSecretRef`'s `ca.crt`
    (with `tls.crt`/`tls.key` as a client certificate)."""
    spec = ctx.obj.spec
    if spec.cert_secret_ref is None:
        return True
    name = spec.cert_secret_ref.name
    data = await secret_data(ctx.client, ctx.obj.namespace, name)
    secret = f"{ctx.obj.namespace}/{name}"
    if not data.get("ca.crt") and not data.get("tls.crt"):
        require(data, "ca.crt", secret=secret)
    try:
        context = ssl.create_default_context(cadata=data["ca.crt"] if data.get("ca.crt") else None)
    except ssl.SSLError:
        raise SecretError(f"secret '{secret}' key 'ca.crt' is not a PEM certificate") from None
    if data.get("tls.crt") or data.get("tls.key"):
        require(data, "tls.crt", "tls.key", secret=secret)
        directory = Path(tempfile.mkdtemp(prefix="rsip-tls-"))
        ctx.cleanup.callback(shutil.rmtree, directory, ignore_errors=True)
        (directory / "tls.crt").write_text(data["tls.crt"])
        (directory / "tls.key").write_text(data["tls.key"])
        try:
            context.load_cert_chain(directory / "tls.crt", directory / "tls.key")
        except ssl.SSLError:
            raise SecretError(f"secret '{secret}': 'tls.crt' and 'tls.key' do not match") from None
    return context


async def _registry(ctx: ProviderContext, url: oci.OCIURL) -> oci.Registry:
    spec = ctx.obj.spec
    username = password = None
    ca_file: str | None = None
    try:
        if spec.secret_ref is not None:
            name = f"{ctx.obj.namespace}/{spec.secret_ref.name}"
            data = await secret_data(ctx.client, ctx.obj.namespace, spec.secret_ref.name)
            require(data, ".dockerconfigjson", secret=name)
            try:
                username, password = oci.credentials_for(data[".dockerconfigjson"], url.host)
            except ValueError as error:
                raise SecretError(f"secret '{name}': {error}") from None
        ca_file = await _ca_file(ctx)
    except SecretError as error:
        raise StepError(Reason.RECONCILIATION_FAILED, str(error)) from None
    return oci.Registry(
        url,
        insecure=spec.insecure,
        ca_file=ca_file,
        username=username,
        password=password,
        timeout=ctx.timeout,
        hints=HINTS,
    )


async def _ca_file(ctx: ProviderContext) -> str | None:
    spec = ctx.obj.spec
    if spec.cert_secret_ref is None:
        return None
    name = spec.cert_secret_ref.name
    data = await secret_data(ctx.client, ctx.obj.namespace, name)
    require(data, "ca.crt", secret=f"{ctx.obj.namespace}/{name}")
    handle = tempfile.NamedTemporaryFile("w", suffix=".crt", delete=False)  # noqa: SIM115
    ctx.cleanup.callback(Path(handle.name).unlink, missing_ok=True)
    with handle:
        handle.write(data["ca.crt"])
    return handle.name


async def _external_service(ctx: ProviderContext) -> list[Input]:
    """`GET url` answering `{"inputs": [...]}`; more than `filter.limit` sets is refused."""
    spec = ctx.obj.spec
    url = spec.url or ""
    headers = {"Accept": "application/json"}
    try:
        if spec.secret_ref is not None:
            data = await secret_data(ctx.client, ctx.obj.namespace, spec.secret_ref.name)
            if data.get("token"):
                headers["Authorization"] = f"Bearer {data['token']}"
            elif data.get("username"):
                auth = aiohttp.BasicAuth(data["username"], data.get("password", ""))
                headers["Authorization"] = auth.encode()
        ca_file = await _ca_file(ctx)
    except SecretError as error:
        raise StepError(Reason.RECONCILIATION_FAILED, str(error)) from None
    tls: ssl.SSLContext | bool = True
    if ca_file is not None:
        tls = ssl.create_default_context(cafile=ca_file)
    try:
        async with ctx.services.session.get(
            url,
            headers=headers,
            ssl=tls,
            timeout=aiohttp.ClientTimeout(total=ctx.timeout),
            allow_redirects=False,
        ) as response:
            if response.status != 200:
                raise StepError(
                    Reason.RECONCILIATION_FAILED,
                    f"external service answered HTTP {response.status}",
                )
            body = await response.content.read(MAX_SERVICE_BODY + 1)
    except (aiohttp.ClientError, TimeoutError) as error:
        raise StepError(
            Reason.RECONCILIATION_FAILED,
            f"cannot reach the external service: {type(error).__name__}",
        ) from None
    if len(body) > MAX_SERVICE_BODY:
        raise InputError(f"the external service's answer exceeds {MAX_SERVICE_BODY} bytes")
    try:
        answer = json.loads(body)
    except ValueError:
        raise InputError("the external service's answer is not JSON") from None
    found = answer.get("inputs") if isinstance(answer, dict) else None
    if not isinstance(found, list) or not all(isinstance(i, dict) for i in found):
        raise InputError("the external service's answer has no list of objects under 'inputs'")
    limit = spec.filter.limit if spec.filter is not None else DEFAULT_FILTER_LIMIT
    inputs.check(found, limit=limit)
    return [dict(i, id=str(i["id"])) for i in found]


# -- 3. status ---------------------------------------------------------------------


@step()
async def reconcile_status(ctx: ProviderContext) -> Result | None:
    status = ctx.obj.status
    revision = inputs.revision(ctx.exported)
    if status.last_exported_revision != revision:
        ctx.log.info("exported inputs changed", revision=revision, count=len(ctx.exported))
    status.exported_inputs = ctx.exported
    status.last_exported_revision = revision
    ctx.ready_reason = Reason.RECONCILIATION_SUCCEEDED
    ctx.ready_message = f"Reconciliation finished with {len(ctx.exported)} input sets"
    interval = timing.interval(ctx.obj.metadata.annotations, default=600.0)
    if ctx.wake_at is not None:
        interval = min(interval, ctx.wake_at)
    return done(requeue_after=interval)


STEPS = (reconcile_spec, reconcile_export, reconcile_status)


def reconciler(services: Services) -> Reconciler[ProviderContext]:
    context = functools.partial(ProviderContext, services=services)
    return Reconciler(
        model=ResourceSetInputProvider,
        steps=STEPS,
        context=context,
        uses_finalizer=False,
        success_reason=Reason.RECONCILIATION_SUCCEEDED,
        default_interval=600.0,
    )
