"""Sluice's API: pydantic models of every kind it serves, Flux's API to the field.

The models are the single source of truth; the CRDs under `crds/` are
generated from them by `python -m sluice_api.crds`.
"""

from typing import Any

from sluice_api.extensions import ArtifactGenerator
from sluice_api.gating import Gate
from sluice_api.gitops import Application
from sluice_api.helm import HelmRelease
from sluice_api.kustomize import Kustomization
from sluice_api.meta import (
    Artifact,
    Condition,
    ConditionType,
    LocalObjectReference,
    ObjectMeta,
    PrinterColumn,
    Reason,
    ReconcileStatus,
    Resource,
    format_duration,
    format_time,
    parse_duration,
    parse_time,
)
from sluice_api.notification import Alert, Provider, Receiver
from sluice_api.resourceset import ResourceSet, ResourceSetInputProvider
from sluice_api.source import (
    Bucket,
    ExternalArtifact,
    GitRepository,
    HelmChart,
    HelmRepository,
    OCIRepository,
)

ALL_KINDS: tuple[type[Resource[Any, Any]], ...] = (
    GitRepository,
    OCIRepository,
    HelmRepository,
    HelmChart,
    Bucket,
    ExternalArtifact,
    ArtifactGenerator,
    Kustomization,
    HelmRelease,
    Gate,
    Receiver,
    Alert,
    Provider,
    Application,
    ResourceSet,
    ResourceSetInputProvider,
)

__all__ = [
    "ALL_KINDS",
    "Alert",
    "Application",
    "Artifact",
    "ArtifactGenerator",
    "Bucket",
    "Condition",
    "ConditionType",
    "ExternalArtifact",
    "Gate",
    "GitRepository",
    "HelmChart",
    "HelmRelease",
    "HelmRepository",
    "Kustomization",
    "LocalObjectReference",
    "OCIRepository",
    "ObjectMeta",
    "PrinterColumn",
    "Provider",
    "Reason",
    "Receiver",
    "ReconcileStatus",
    "Resource",
    "ResourceSet",
    "ResourceSetInputProvider",
    "format_duration",
    "format_time",
    "parse_duration",
    "parse_time",
]
