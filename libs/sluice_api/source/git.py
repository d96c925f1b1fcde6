"""GitRepository: a Git ref to produce artifacts from (Flux's source.toolkit.fluxcd.io/v1)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from sluice_api.meta import (
    Artifact,
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
    URL_SOURCE_COLUMNS,
    VERSION,
    AccessFrom,
    GitURL,
    SourceStatus,
)

# GitRepository ----------------------------------------------------------------


class GitRepositoryRef(KubeModel):
    """The Git reference to check out.

    Precedence: commit, then name, then semver, then tag, then branch.
    """

    branch: str | None = None
    """Branch to check out; `master` when no other field is set."""

    tag: str | None = None
    """Tag to check out; takes precedence over branch."""

    semver: str | None = None
    """SemVer range of tags; the highest matching tag is checked out."""

    name: str | None = None
    """Full Git reference, e.g. `refs/heads/main` or `refs/pull/420/head`."""

    commit: str | None = None
    """Commit SHA to check out; with branch, the branch is cloned shallowly."""


class GitRepositoryVerification(KubeModel):
    """How to verify the signatures of Git commits and tags."""

    mode: Literal["head", "HEAD", "Tag", "TagAndHEAD"] = "HEAD"
    """Which Git objects to verify; `head` is an alias of `HEAD`."""

    secret_ref: LocalObjectReference
    """Secret holding the trusted keys (`*.asc` PGP, `*.sshpub` SSH)."""


class GitRepositoryInclude(KubeModel):
    """Another GitRepository's artifact to copy into this one."""

    repository: LocalObjectReference
    """The GitRepository whose artifact is included."""

    from_path: str | None = None
    """Path in the included artifact to copy from; its root by default."""

    to_path: str | None = None
    """Path to copy to; the included repository's name by default."""


class GitRepositorySpec(KubeModel):
    """How to produce an artifact from a Git repository."""

    url: GitURL
    """Repository URL, http(s):// or ssh://."""

    secret_ref: LocalObjectReference | None = None
    """Secret with credentials: `username`/`password` or `bearerToken` for
    HTTPS, `identity` and `known_hosts` for SSH, optionally `ca.crt`."""

    provider: Literal["generic", "aws", "azure", "github"] | None = None
    """Authentication provider; `generic` (the secretRef) when not set."""

    service_account_name: str | None = None
    """ServiceAccount to authenticate as, for the `azure` and `aws` providers."""

    interval: Duration
    """How often to check the repository for a new revision."""

    timeout: TimeoutDuration = "60s"
    """Timeout for Git operations such as cloning."""

    ref: GitRepositoryRef | None = None
    """The Git reference to resolve and watch; branch `master` by default."""

    verify: GitRepositoryVerification | None = None
    """Verify commit or tag signatures before producing an artifact."""

    proxy_secret_ref: LocalObjectReference | None = None
    """Secret with the proxy (`address`, `username`, `password`) to use."""

    ignore: str | None = None
    """Exclusions in .gitignore syntax; replaces the default exclusions."""

    suspend: bool = False
    """Stop reconciling this object."""

    recurse_submodules: bool = False
    """Initialise and check out all submodules."""

    include: list[GitRepositoryInclude] | None = None
    """Other GitRepositories whose artifacts are copied into this artifact."""

    sparse_checkout: list[str] | None = None
    """Directories to check out; only these end up in the artifact."""

    gates: list[LocalObjectReference] | None = None
    """Sluice: Gates that must be open before a new revision is fetched."""

    git_implementation: Literal["go-git", "libgit2"] | None = None
    """(v1beta1, v1beta2) Which Git library to use. Deprecated by Flux and without
    effect, as in Flux v1beta2: Sluice always uses libgit2 (through pygit2)."""

    access_from: AccessFrom | None = None
    """(v1beta1, v1beta2) Namespaces allowed to reference this source. Deprecated by
    Flux and not enforced, as in Flux v1beta2."""


class GitRepositoryStatus(SourceStatus):
    """Observed state of a GitRepository."""

    included_artifacts: list[Artifact] | None = None
    """The artifacts of the includes, as last included."""

    observed_ignore: str | None = None
    """The ignore rules the current artifact was built with."""

    observed_recurse_submodules: bool | None = None
    """The submodule setting the current artifact was built with."""

    observed_include: list[GitRepositoryInclude] | None = None
    """The includes the current artifact was built with."""

    observed_sparse_checkout: list[str] | None = None
    """The sparse checkout directories the current artifact was built with."""

    source_verification_mode: Literal["head", "HEAD", "Tag", "TagAndHEAD"] | None = None
    """The verification mode last used."""

    content_config_checksum: str | None = None
    """Checksum of everything besides the commit that shapes the artifact's
    content (ignore rules, includes, sparse checkout, submodules)."""


class GitRepository(Resource[GitRepositorySpec, GitRepositoryStatus]):
    """A Git repository to produce artifacts from."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "GitRepository"
    PLURAL: ClassVar[str] = "gitrepositories"
    SINGULAR: ClassVar[str] = "gitrepository"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("gitrepo",)
    CATEGORIES: ClassVar[tuple[str, ...]] = CATEGORIES
    EXTRA_VERSIONS: ClassVar[tuple[str, ...]] = ("v1beta2", "v1beta1")
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = URL_SOURCE_COLUMNS

    spec: GitRepositorySpec
    status: GitRepositoryStatus = Field(default_factory=GitRepositoryStatus)
