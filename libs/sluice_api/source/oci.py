"""OCIRepository: an OCI artifact to produce artifacts from (Flux's source.toolkit.fluxcd.io/v1)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

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
    OCIURL,
    URL_COLUMN,
    VERSION,
    OCIRepositoryVerification,
    SourceStatus,
)

# OCIRepository ----------------------------------------------------------------


class OCIRepositoryRef(KubeModel):
    """The OCI artifact to pull; precedence: digest, then semver, then tag."""

    digest: str | None = None
    """Digest to pull, `sha256:<hex>`."""

    semver: str | None = None
    """SemVer range of tags; the highest matching tag is pulled."""

    semver_filter: str | None = None
    """Regular expression the tags within the semver range must match."""

    tag: str | None = None
    """Tag to pull; `latest` when no other field is set."""


class OCILayerSelector(KubeModel):
    """Which layer of the OCI artifact becomes the Sluice artifact, and how."""

    media_type: str | None = None
    """Media type of the layer; the first matching layer is selected."""

    operation: Literal["extract", "copy"] | None = None
    """`extract` (default) unpacks the layer; `copy` stores it as it is."""


class OCIRepositorySpec(KubeModel):
    """How to produce an artifact from an OCI artifact in a container registry."""

    url: OCIURL
    """Repository address, `oci://host/repository`."""

    ref: OCIRepositoryRef | None = None
    """The OCI reference to pull and watch; tag `latest` by default."""

    layer_selector: OCILayerSelector | None = None
    """The layer to use; the first layer when not set."""

    provider: Literal["generic", "aws", "azure", "gcp"] = "generic"
    """Authentication provider; `generic` uses secretRef."""

    secret_ref: LocalObjectReference | None = None
    """Secret of type kubernetes.io/dockerconfigjson with registry credentials."""

    verify: OCIRepositoryVerification | None = None
    """Verify the artifact's signature before producing an artifact."""

    service_account_name: str | None = None
    """ServiceAccount whose image pull secrets are used to authenticate."""

    cert_secret_ref: LocalObjectReference | None = None
    """Secret with a client certificate (`tls.crt`, `tls.key`) and/or a CA
    certificate (`ca.crt`) for the registry connection."""

    proxy_secret_ref: LocalObjectReference | None = None
    """Secret with the proxy (`address`, `username`, `password`) to use."""

    interval: Duration
    """How often to check the registry for a new revision."""

    timeout: TimeoutDuration = "60s"
    """Timeout for registry operations such as pulling."""

    ignore: str | None = None
    """Exclusions in .gitignore syntax; replaces the default exclusions."""

    insecure: bool = False
    """Allow connecting to a registry over plain HTTP."""

    suspend: bool = False
    """Stop reconciling this object."""

    gates: list[LocalObjectReference] | None = None
    """Sluice: Gates that must be open before a new revision is fetched."""


class OCIRepositoryStatus(SourceStatus):
    """Observed state of an OCIRepository."""

    observed_ignore: str | None = None
    """The ignore rules the current artifact was built with."""

    observed_layer_selector: OCILayerSelector | None = None
    """The layer selector the current artifact was built with."""

    content_config_checksum: str | None = None
    """Checksum of everything besides the digest that shapes the artifact's content."""


class OCIRepository(Resource[OCIRepositorySpec, OCIRepositoryStatus]):
    """An OCI artifact repository to produce artifacts from."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "OCIRepository"
    PLURAL: ClassVar[str] = "ocirepositories"
    SINGULAR: ClassVar[str] = "ocirepository"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("ocirepo",)
    CATEGORIES: ClassVar[tuple[str, ...]] = CATEGORIES
    EXTRA_VERSIONS: ClassVar[tuple[str, ...]] = ("v1beta2",)
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        URL_COLUMN,
        READY_COLUMN,
        STATUS_COLUMN,
        AGE_COLUMN,
        ARTIFACT_REVISION_COLUMN,
    )

    spec: OCIRepositorySpec
    status: OCIRepositoryStatus = Field(default_factory=OCIRepositoryStatus)
