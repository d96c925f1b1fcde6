"""What a build changes in the objects kustomize produced: patches, image overrides,
and the selector that names the objects a patch or rule applies to.

The HelmRelease's kustomize post-renderer takes the same types.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sluice_api.kustomize.common import AnyJSON
from sluice_api.meta import KubeModel


class Selector(KubeModel):
    """Selects objects; an object must match every field that is set."""

    group: str | None = None
    """API group of the objects."""

    version: str | None = None
    """API version of the objects."""

    kind: str | None = None
    """Kind of the objects."""

    namespace: str | None = None
    """Namespace of the objects."""

    name: str | None = None
    """Name of the objects."""

    annotation_selector: str | None = None
    """A label selector expression matched against the objects' annotations."""

    label_selector: str | None = None
    """A label selector expression matched against the objects' labels."""


class Patch(KubeModel):
    """A strategic merge or JSON 6902 patch and the objects it applies to."""

    patch: str
    """The patch document, inline YAML."""

    target: Selector | None = None
    """The objects to patch; a strategic merge patch names its target itself."""


class Image(KubeModel):
    """An image name, tag or digest to replace in the built manifests."""

    name: str
    """The image name to match, without tag."""

    new_name: str | None = None
    """Replaces the name."""

    new_tag: str | None = None
    """Replaces the tag."""

    digest: str | None = None
    """Replaces the tag with a digest; newTag is ignored when set."""


class JSON6902Operation(KubeModel):
    """One operation of a JSON 6902 patch."""

    op: Literal["test", "remove", "add", "replace", "move", "copy"]
    """The operation."""

    path: str
    """JSON pointer to the location the operation acts on."""

    from_: str | None = Field(default=None, alias="from")
    """JSON pointer to the source location of move and copy."""

    value: AnyJSON = None
    """The value of add, replace and test; any JSON."""


class JSON6902Patch(KubeModel):
    """(v1beta1, v1beta2) A JSON 6902 patch and the objects it applies to."""

    patch: list[JSON6902Operation]
    """The operations, in order."""

    target: Selector
    """The objects to patch."""
