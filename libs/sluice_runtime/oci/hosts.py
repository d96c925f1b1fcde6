"""Which registry a host names, and which of a Docker config's logins is for it.

References name Docker Hub `docker.io/<org>/<repository>`, but its registry
API answers at `registry-1.docker.io`, official images live under
`library/`, and `docker login` files the login under
`https://index.docker.io/v1/`. go-containerregistry (Flux's client) maps all
of that; oras-py sends requests to the host as written, so without this a
Docker Hub reference reached docker.io's website and the login in the Docker
config file or a dockerconfigjson Secret was never found. Messages keep the
host the user wrote.
"""

from __future__ import annotations

import base64
import json
import re

DOCKER_HUB_API = "registry-1.docker.io"
DOCKER_HUB_HOSTS = frozenset({"docker.io", "index.docker.io", DOCKER_HUB_API})
DOCKER_HUB_LOGIN = "https://index.docker.io/v1/"


def api_location(host: str, repository: str) -> tuple[str, str]:
    """Where a registry API request for `host/repository` goes: host and repository."""
    if host not in DOCKER_HUB_HOSTS:
        return host, repository
    return DOCKER_HUB_API, repository if "/" in repository else f"library/{repository}"


def login_server(host: str) -> str:
    """The name `docker login` files `host`'s login under, and asks credential helpers for."""
    return DOCKER_HUB_LOGIN if host in DOCKER_HUB_HOSTS else host


def same_registry(configured: str, host: str) -> bool:
    """Whether a Docker config key's registry (`https://` and path removed) is `host`'s."""
    return configured == host or (configured in DOCKER_HUB_HOSTS and host in DOCKER_HUB_HOSTS)


def credentials_for(dockerconfigjson: str, host: str) -> tuple[str | None, str | None]:
    """The username and password a dockerconfigjson Secret holds for `host`."""
    try:
        config = json.loads(dockerconfigjson)
    except ValueError:
        raise ValueError("'.dockerconfigjson' is not JSON") from None
    auths = config.get("auths") or {}
    for key, entry in auths.items():
        if not same_registry(re.sub(r"^https?://", "", key).split("/", 1)[0], host):
            continue
        if entry.get("username"):
            return entry["username"], entry.get("password")
        if entry.get("auth"):
            user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            return user, password
    return None, None
