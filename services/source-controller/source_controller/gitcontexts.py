"""What the GitRepository steps share: the controller's services and the reconcile's context."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sluice_api.meta import Artifact
from sluice_api.source import GitRepository, GitRepositoryInclude
from sluice_runtime.artifacts.storage import Storage
from sluice_runtime.git import client as gitclient
from sluice_runtime.informing.watching import Store
from source_controller.gitcache import CommitCache, Entry
from source_controller.refs import ResolvedRef
from source_controller.sources import Limits, SourceContext


@dataclass
class GitServices:
    """What GitRepository steps share across reconciles."""

    storage: Storage
    repositories: Store
    """The GitRepository cache, for includes."""
    gates: Store | None = None
    include_requeue: float = 10.0
    limits: Limits = field(default_factory=Limits)
    cache: CommitCache | None = None
    """Finished tarballs by URL, commit and content config (None: no sharing)."""


@dataclass(kw_only=True)
class GitRepositoryContext(SourceContext[GitRepository]):
    services: GitServices
    workdir: Path | None = None
    resolved: ResolvedRef | None = None
    checkout_message: str = ""
    checkout: gitclient.Checkout | None = None
    """The commit checked out, with its signatures (None after a no-op fetch)."""
    noop: bool = False
    includes: list[tuple[GitRepositoryInclude, Artifact]] = field(default_factory=list)
    content_checksum: str = ""
    cache_key: str | None = None
    """Set when this reconcile may use and fill the commit cache."""
    cached: Entry | None = None
    """The cache's tarball for this commit and content, used instead of a checkout."""
