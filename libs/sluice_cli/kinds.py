"""The kinds the everyday verbs know, named on the command line as the flux CLI names them.

`flux get sources git`, `flux reconcile kustomization`, `flux suspend hr`: a
kind is one word (with a short alias) or `source <type>`. Each kind also says
which of Flux's columns it has (receivers and alerts have no revision,
providers nothing to suspend) and where its revision is read from.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sluice_api import (
    Alert,
    Application,
    ArtifactGenerator,
    Bucket,
    ExternalArtifact,
    Gate,
    GitRepository,
    HelmChart,
    HelmRelease,
    HelmRepository,
    Kustomization,
    OCIRepository,
    Provider,
    Receiver,
    ResourceSet,
    ResourceSetInputProvider,
    extensions,
    resourceset,
)
from sluice_runtime.conditions import condition_of
from sluice_runtime.kube.client import JSON
from sluice_runtime.kube.resources import ResourceType

HELM_RELEASE = ResourceType.of_model(HelmRelease)


def _artifact_revision(obj: JSON) -> str:
    return str(((obj.get("status") or {}).get("artifact") or {}).get("revision") or "")


def _applied_revision(obj: JSON) -> str:
    return str((obj.get("status") or {}).get("lastAppliedRevision") or "")


def _release_revision(obj: JSON) -> str:
    status = obj.get("status") or {}
    history = status.get("history") or []
    if history and isinstance(history[0], dict) and history[0].get("chartVersion"):
        return str(history[0]["chartVersion"])
    return str(status.get("lastAttemptedRevision") or "")


def _no_revision(obj: JSON) -> str:
    return ""


def _spec_suspended(obj: JSON) -> bool:
    return bool((obj.get("spec") or {}).get("suspend"))


def _spec_suspend_patch(suspend: bool) -> JSON:
    # null removes the field, as `flux resume` leaves no `suspend: false` behind.
    return {"spec": {"suspend": True if suspend else None}}


def _annotation_suspend(annotation: str) -> tuple[Callable[[JSON], bool], Callable[[bool], JSON]]:
    """Kinds with no spec.suspend (Flux Operator's, the ArtifactGenerator) are
    suspended by their `reconcile: disabled` annotation, as their own CLIs do it."""

    def suspended(obj: JSON) -> bool:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        return str(annotations.get(annotation) or "").lower() == "disabled"

    def patch(suspend: bool) -> JSON:
        return {"metadata": {"annotations": {annotation: "disabled" if suspend else None}}}

    return suspended, patch


@dataclass(frozen=True, slots=True)
class Column:
    """A column of `get` beyond NAME, READY and MESSAGE."""

    header: str
    value: Callable[[JSON], str]


@dataclass(frozen=True, slots=True)
class Kind:
    rt: ResourceType
    word: str
    """The singular on the command line: `kustomization`, or the type of a source: `git`."""
    plural: str
    """What `get` calls a list of them: `kustomizations`, or `git` under `get sources`."""
    aliases: tuple[str, ...] = ()
    source: bool = False
    """Named `source <word>`, as Flux names its sources."""
    revision: Callable[[JSON], str] = _no_revision
    has_revision: bool = True
    suspendable: bool = True
    reconcilable: bool = True
    """False for what no controller reconciles (an ExternalArtifact: its producer does)."""
    suspended: Callable[[JSON], bool] = _spec_suspended
    suspend_patch: Callable[[bool], JSON] = _spec_suspend_patch
    before: tuple[Column, ...] | None = None
    """Columns between NAME and READY; None: Flux's REVISION and SUSPENDED."""
    after: tuple[Column, ...] = ()
    """Columns after MESSAGE (Flux Operator's LAST RECONCILED, NEXT SCHEDULE)."""
    done: str = ""
    """What `reconcile` says was done with the revision; `fetched` for sources,
    `applied` for the rest, unless set."""
    suspended_in_ready: bool = False
    """READY says `Suspended` for a suspended object, as `flux-operator get` shows it."""

    @property
    def name(self) -> str:
        return self.rt.kind

    def describe(self, namespace: str, name: str) -> str:
        return f"{self.rt.kind} {namespace}/{name}"

    def columns(self) -> tuple[Column, ...]:
        """The columns between NAME and READY."""
        if self.before is not None:
            return self.before
        columns = []
        if self.has_revision:
            columns.append(Column("REVISION", self.revision))
        if self.suspendable:
            columns.append(Column("SUSPENDED", lambda obj: str(self.suspended(obj))))
        return tuple(columns)


def _source(model: Any, word: str) -> Kind:
    return Kind(ResourceType.of_model(model), word, word, source=True, revision=_artifact_revision)


HELMCHART = _source(HelmChart, "chart")
EXTERNAL = Kind(
    ResourceType.of_model(ExternalArtifact),
    "external",
    "external",
    source=True,
    revision=_artifact_revision,
    suspendable=False,
    reconcilable=False,
)
SOURCES = (
    _source(GitRepository, "git"),
    _source(OCIRepository, "oci"),
    _source(HelmRepository, "helm"),
    HELMCHART,
    _source(Bucket, "bucket"),
    EXTERNAL,
)
KUSTOMIZATION = Kind(
    ResourceType.of_model(Kustomization),
    "kustomization",
    "kustomizations",
    aliases=("ks",),
    revision=_applied_revision,
)
HELMRELEASE = Kind(
    HELM_RELEASE, "helmrelease", "helmreleases", aliases=("hr",), revision=_release_revision
)
GATE = Kind(ResourceType.of_model(Gate), "gate", "gates", has_revision=False, suspendable=False)
RECEIVER = Kind(ResourceType.of_model(Receiver), "receiver", "receivers", has_revision=False)
ALERT = Kind(ResourceType.of_model(Alert), "alert", "alerts", has_revision=False)
PROVIDER = Kind(
    ResourceType.of_model(Provider), "alert-provider", "alert-providers", has_revision=False
)

_GENERATOR_SUSPENDED, _GENERATOR_SUSPEND = _annotation_suspend(extensions.RECONCILE_ANNOTATION)
ARTIFACT_GENERATOR = Kind(
    ResourceType.of_model(ArtifactGenerator),
    "artifactgenerator",
    "artifactgenerators",
    aliases=("ag",),
    has_revision=False,
    suspended=_GENERATOR_SUSPENDED,
    suspend_patch=_GENERATOR_SUSPEND,
)


def _last_reconciled(obj: JSON) -> str:
    return str((condition_of(obj) or {}).get("lastTransitionTime") or "Unknown")


def _count(field: str, inner: str | None = None) -> Callable[[JSON], str]:
    def count(obj: JSON) -> str:
        value = (obj.get("status") or {}).get(field) or {}
        if inner is not None:
            value = (value.get(inner) or []) if isinstance(value, dict) else []
        return str(len(value) if isinstance(value, list) else 0)

    return count


def _next_schedule(obj: JSON) -> str:
    return str(((obj.get("status") or {}).get("nextSchedule") or {}).get("when") or "")


_SET_SUSPENDED, _SET_SUSPEND = _annotation_suspend(resourceset.RECONCILE_ANNOTATION)
RESOURCESET = Kind(
    ResourceType.of_model(ResourceSet),
    "resourceset",
    "resourcesets",
    aliases=("rset",),
    revision=_applied_revision,
    suspended=_SET_SUSPENDED,
    suspend_patch=_SET_SUSPEND,
    before=(Column("RESOURCES", _count("inventory", "entries")),),
    after=(Column("LAST RECONCILED", _last_reconciled),),
    suspended_in_ready=True,
)
INPUT_PROVIDER = Kind(
    ResourceType.of_model(ResourceSetInputProvider),
    "inputprovider",
    "inputproviders",
    aliases=("rsip", "resourcesetinputprovider", "resourcesetinputproviders"),
    revision=lambda obj: str((obj.get("status") or {}).get("lastExportedRevision") or ""),
    suspended=_SET_SUSPENDED,
    suspend_patch=_SET_SUSPEND,
    done="exported",
    before=(Column("INPUTS", _count("exportedInputs")),),
    after=(Column("NEXT SCHEDULE", _next_schedule),),
    suspended_in_ready=True,
)


def _ready_children(obj: JSON) -> str:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return str(labels.get("gitops.kubesphere.io/ready-number") or "")


APPLICATION = Kind(
    ResourceType.of_model(Application),
    "application",
    "applications",
    aliases=("app",),
    suspendable=False,
    # Flux has no such kind: the columns are the CRD's own (kubectl get applications).
    before=(
        Column("KIND", lambda obj: str((obj.get("spec") or {}).get("kind") or "")),
        Column("READY CHILDREN", _ready_children),
    ),
)

DELIVERY = (KUSTOMIZATION, HELMRELEASE)
OTHERS = (GATE, RECEIVER, ALERT, PROVIDER)
EXTENDED = (ARTIFACT_GENERATOR, RESOURCESET, INPUT_PROVIDER, APPLICATION)
"""The kinds beyond Flux's own controllers: source extensions, Flux Operator's, KubeSphere's."""
ALL = (*SOURCES, *DELIVERY, *OTHERS, *EXTENDED)
"""Every kind, in the order `get all` lists them (sources first, as Flux does)."""


def of_kind(kind: str) -> Kind | None:
    """The Kind for a Kubernetes kind name (`Kustomization`), if the verbs know it."""
    for candidate in ALL:
        if candidate.rt.kind == kind:
            return candidate
    return None


def source_of(obj: JSON) -> tuple[Kind, str, str] | None:
    """The source an object reads, as `flux reconcile --with-source` follows it: its
    Kind, namespace and name.

    A Kustomization's or HelmChart's `sourceRef`; a HelmRelease's `chartRef`
    (an OCIRepository or a HelmChart), or, for `chart.spec`, the HelmChart the
    helm-controller made of it (`status.helmChart`, else `<namespace>-<name>` in
    the chart source's namespace), so the new chart version is pulled before
    the release is reconciled.
    """
    spec = obj.get("spec") or {}
    metadata = obj.get("metadata") or {}
    own_namespace = str(metadata.get("namespace") or "")
    ref = spec.get("sourceRef") or spec.get("chartRef")
    chart = spec.get("chart")  # a HelmChart's is the chart's name, a HelmRelease's a template
    chart_spec = chart.get("spec") if isinstance(chart, dict) else None
    if ref is None and isinstance(chart_spec, dict):
        made = str((obj.get("status") or {}).get("helmChart") or "")
        if "/" in made:
            namespace, name = made.split("/", 1)
            return HELMCHART, namespace, name
        source = chart_spec.get("sourceRef") or {}
        namespace = str(source.get("namespace") or own_namespace)
        return HELMCHART, namespace, f"{own_namespace}-{metadata.get('name') or ''}"
    if not isinstance(ref, dict):
        return None
    kind = of_kind(str(ref.get("kind") or ""))
    if kind is None or not kind.source or not kind.reconcilable:
        return None  # an ExternalArtifact is its producer's to refresh, not the CLI's
    return kind, str(ref.get("namespace") or own_namespace), str(ref.get("name") or "")


def status_and_message(obj: JSON) -> tuple[str, str]:
    """READY and MESSAGE as Flux shows them; never reconciled: False, waiting."""
    ready = condition_of(obj)
    if ready is None:
        return "False", "waiting to be reconciled"
    message = " ".join(str(ready.get("message") or "").split())
    return str(ready.get("status") or "Unknown"), message


def add_kind_parsers(
    commands: Any,
    *,
    verb: str,
    configure: Callable[[argparse.ArgumentParser, tuple[Kind, ...]], None],
    description: str,
    kinds: tuple[Kind, ...] = ALL,
    plural: bool = False,
) -> None:
    """One sub-command per kind under `verb`, and `source <type>` for sources.

    `configure` adds the kind's arguments and `run`; it gets the kinds the
    sub-command stands for (several for `get sources all` and `get all`).
    `description` is Flux's sentence for each sub-command, with `{command}`
    (`get kustomizations`), `{kind}` (`Kustomization`) and `{a_kind}`
    (`an OCIRepository`) filled in.
    """

    def add(
        group: Any, word: str, aliases: list[str], command: str, kind: str, summary: str
    ) -> Any:
        return group.add_parser(
            word,
            aliases=aliases,
            help=summary,
            description=description.format(
                command=command, kind=kind, a_kind=("an " if kind[0] in "AEIOU" else "a ") + kind
            ),
        )

    sources = tuple(kind for kind in kinds if kind.source)
    if sources:
        word, aliases = ("sources", ["source"]) if plural else ("source", [])
        group = commands.add_parser(
            word, aliases=aliases, help=f"{verb} sources",
            description=f"The {verb} source sub-commands {verb} sources.",
        )  # fmt: skip
        types = group.add_subparsers(dest="source_type", required=True, metavar="TYPE")
        for kind in sources:
            summary = f"{verb} {kind.rt.kind} sources" if plural else f"{verb} a {kind.rt.kind}"
            command = f"{verb} {word} {kind.word}"
            configure(add(types, kind.word, [], command, kind.rt.kind, summary), (kind,))
        if plural:
            every = add(types, "all", [], f"{verb} {word} all", "source", f"{verb} all sources")
            configure(every, sources)
    for kind in kinds:
        if kind.source:
            continue
        if plural:
            word, aliases = kind.plural, [kind.word, *kind.aliases]
            summary = f"{verb} {kind.rt.kind} statuses"
        else:
            word, aliases = kind.word, list(kind.aliases)
            summary = f"{verb} a {kind.rt.kind}"
        command = f"{verb} {word}"
        configure(add(commands, word, aliases, command, kind.rt.kind, summary), (kind,))
    if plural:
        every = add(
            commands, "all", [], f"{verb} all", "Flux", f"{verb} all resources and statuses"
        )
        configure(every, kinds)
