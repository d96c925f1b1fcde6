"""Sluice's controllers (the one list of them), and, as deployed in a cluster,
their Deployments, versions and pods.

The chart runs each controller as a Deployment named after it, labelled
`app: <name>`, in the controllers' namespace (flux-system), with one
container called `manager`; its image tag is the controller's version.
`sluice check`, `version` and `logs` find them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import ResourceType

if TYPE_CHECKING:  # `sluice version --client` and `dev` read the list without a client
    from sluice_runtime.kube.client import JSON, KubeClient


@dataclass(frozen=True, slots=True)
class Controller:
    """One controller: the single definition the CLI, `sluice dev`, the image
    build and the tests read, so adding a controller is one line here (and a
    test holds pyproject's entry points and the chart's values to this list)."""

    name: str
    """Its entry point, Deployment, ServiceAccount and `app` label."""
    module: str
    """The package whose `__main__` runs it."""
    values_key: str
    """Its section of charts/sluice/values.yaml."""
    default: bool = True
    """Deployed by the chart's default values (`<values_key>.create`)."""


CONTROLLERS = (
    Controller("source-controller", "source_controller", "sourceController"),
    Controller("kustomize-controller", "kustomize_controller", "kustomizeController"),
    Controller("helm-controller", "helm_controller", "helmController"),
    Controller(
        "application-controller", "application_controller", "applicationController", default=False
    ),
    Controller("resourceset-controller", "resourceset_controller", "resourcesetController"),
    Controller("gating-controller", "gating_controller", "gatingController"),
    Controller("notification-controller", "notification_controller", "notificationController"),
)
NAMES = tuple(controller.name for controller in CONTROLLERS)
DEFAULT = tuple(controller.name for controller in CONTROLLERS if controller.default)
"""What `helm install` deploys without values, and `sluice check` expects."""
CONTAINER = "manager"
DEPLOYMENT = ResourceType("apps", "v1", "deployments", "Deployment")
POD = ResourceType("", "v1", "pods", "Pod")


@dataclass(frozen=True, slots=True)
class Deployed:
    name: str
    image: str
    replicas: int
    ready: int

    @property
    def version(self) -> str:
        """The image's tag (or digest), the version of the controller it runs."""
        image = self.image
        if "@" in image:
            return image.split("@", 1)[1]
        last = image.rsplit("/", 1)[-1]
        return last.split(":", 1)[1] if ":" in last else "latest"


def deployed(deployment: JSON) -> Deployed:
    spec = deployment.get("spec") or {}
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    manager = next((c for c in containers if c.get("name") == CONTAINER), None)
    image = str((manager or (containers[0] if containers else {})).get("image") or "")
    status = deployment.get("status") or {}
    return Deployed(
        name=str((deployment.get("metadata") or {}).get("name") or ""),
        image=image,
        replicas=int(spec.get("replicas", 1) or 0),
        ready=int(status.get("readyReplicas") or 0),
    )


async def find(client: KubeClient, namespace: str, name: str) -> Deployed | None:
    try:
        return deployed(await client.get(DEPLOYMENT, name, namespace))
    except NotFound:
        return None
