"""Bucket: an S3-compatible bucket to produce artifacts from (source.toolkit.fluxcd.io/v1)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, StringConstraints

from sluice_api.meta import (
    AGE_COLUMN,
    ARTIFACT_REVISION_COLUMN,
    READY_COLUMN,
    STATUS_COLUMN,
    Duration,
    KubeModel,
    LocalObjectReference,
    PrinterColumn,
    Resource,
    TimeoutDuration,
)
from sluice_api.source.common import (
    CATEGORIES,
    GROUP,
    VERSION,
    AccessFrom,
    SourceStatus,
)

# Bucket -----------------------------------------------------------------------


class BucketSTSSpec(KubeModel):
    """A Security Token Service to fetch temporary bucket credentials from."""

    provider: Literal["aws", "ldap"]
    """The kind of STS: `aws` for the aws provider, `ldap` for generic."""

    endpoint: Annotated[str, StringConstraints(pattern=r"^(http|https)://.*$")]
    """HTTP(S) address of the STS."""

    secret_ref: LocalObjectReference | None = None
    """Secret with `username` and `password`; ldap only."""

    cert_secret_ref: LocalObjectReference | None = None
    """Secret with TLS material for the STS connection; ldap only."""


class BucketSpec(KubeModel):
    """How to produce an artifact from an object storage bucket."""

    provider: Literal["generic", "aws", "gcp", "azure"] = "generic"
    """Object storage provider; `generic` is any S3-compatible API."""

    bucket_name: str
    """Name of the bucket."""

    endpoint: str
    """Address of the object storage, e.g. `minio.example.com:9000`."""

    sts: BucketSTSSpec | None = None
    """Fetch temporary credentials from a Security Token Service."""

    insecure: bool = False
    """Connect to the endpoint over plain HTTP."""

    region: str | None = None
    """Region of the bucket."""

    prefix: str | None = None
    """Only objects whose key starts with this prefix are fetched."""

    secret_ref: LocalObjectReference | None = None
    """Secret with `accesskey` and `secretkey`."""

    service_account_name: str | None = None
    """ServiceAccount to authenticate as, for the `gcp` and `aws` providers."""

    cert_secret_ref: LocalObjectReference | None = None
    """Secret with a client certificate (`tls.crt`, `tls.key`) and/or a CA
    certificate (`ca.crt`); generic provider only."""

    proxy_secret_ref: LocalObjectReference | None = None
    """Secret with the proxy (`address`, `username`, `password`) to use."""

    interval: Duration
    """How often to check the bucket for changes."""

    timeout: TimeoutDuration = "60s"
    """Timeout for fetch operations."""

    ignore: str | None = None
    """Exclusions in .gitignore syntax; replaces the default exclusions."""

    suspend: bool = False
    """Stop reconciling this object."""

    gates: list[LocalObjectReference] | None = None
    """Sluice: Gates that must be open before a new revision is fetched."""

    access_from: AccessFrom | None = None
    """(v1beta1, v1beta2) Namespaces allowed to reference this source. Deprecated by
    Flux and not enforced, as in Flux v1beta2."""


class BucketStatus(SourceStatus):
    """Observed state of a Bucket."""

    observed_ignore: str | None = None
    """The ignore rules the current artifact was built with."""


class Bucket(Resource[BucketSpec, BucketStatus]):
    """An object storage bucket to produce artifacts from."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "Bucket"
    PLURAL: ClassVar[str] = "buckets"
    SINGULAR: ClassVar[str] = "bucket"
    CATEGORIES: ClassVar[tuple[str, ...]] = CATEGORIES
    EXTRA_VERSIONS: ClassVar[tuple[str, ...]] = ("v1beta2", "v1beta1")
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn(name="Endpoint", type="string", json_path=".spec.endpoint"),
        AGE_COLUMN,
        READY_COLUMN,
        STATUS_COLUMN,
        ARTIFACT_REVISION_COLUMN,
    )

    spec: BucketSpec
    status: BucketStatus = Field(default_factory=BucketStatus)
