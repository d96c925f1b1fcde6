"""The oras-based client of `oci.registry`: kept apart so that oras loads on first use.

See `sluice_runtime.oci.registry` for what it does and why; `registry.Registry`
is this class.
"""

from __future__ import annotations

import base64
import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import oras.auth
import oras.container
import oras.provider
import requests
import requests.adapters
import requests.sessions
import requests.structures
import requests.utils

from sluice_runtime.describing import describe_http_status, describe_transport
from sluice_runtime.oci.artifacts import MANIFEST_TYPES
from sluice_runtime.oci.hosts import api_location
from sluice_runtime.oci.registry import (
    _DIGEST,
    _NEXT_LINK,
    MAX_MANIFEST_SIZE,
    MAX_TAGS,
    MAX_TAGS_PAGE_SIZE,
    OCIURL,
    Hints,
    Manifest,
    RegistryError,
)

_CONNECTIONS = requests.adapters.HTTPAdapter(pool_connections=16, pool_maxsize=8)
"""One pool of kept-alive connections for every `Registry` of the process.

A `Registry` lives for one reconcile (its credentials and token are that
object's), and its session would open a connection of its own each time: a
TCP and TLS handshake per source reconcile against the same registry (issue
19). The session (headers, auth state, no cookies) stays per object; only
sockets are shared, and urllib3 keys its pools by scheme, host, port and TLS
settings (CA file, verification), so a connection is reused only where a new
one would have been made the same way. urllib3's pools are thread-safe: the
source-controller's registry threads share them."""


_BASIC_REALMS: set[tuple[str, str]] = set()
"""Registries (scheme, host) that have asked this process for basic credentials.

A `Registry` lives for one reconcile, so without this each pull from an
htpasswd registry began with a request answered 401 before the same one with
credentials: three round trips for a manifest and a layer, not two. A
`Registry` with credentials for a host listed here sends them with its first
request; only the host that asked gets them, and if it has since moved to
token auth, its 401 challenge is answered as any other."""


class Registry(oras.provider.Registry):  # type: ignore[misc]
    def __init__(
        self,
        url: OCIURL,
        *,
        insecure: bool,
        ca_file: str | None,
        username: str | None,
        password: str | None,
        timeout: float,
        hints: Hints,
    ) -> None:
        host, repository = api_location(url.host, url.repository)
        super().__init__(hostname=host, insecure=insecure, tls_verify=ca_file if ca_file else True)
        self.session.mount("https://", _CONNECTIONS)
        self.session.mount("http://", _CONNECTIONS)
        self.url = url
        self.timeout = timeout
        self.hints = hints
        self.container = oras.container.Container(f"{host}/{repository}")
        self._basic: str | None = None
        self._basic_preemptive = False
        if username:
            self.auth.set_basic_auth(username, password or "")
            token = base64.b64encode(f"{username}:{password or ''}".encode()).decode()
            self._basic = f"Basic {token}"
            self._basic_preemptive = (self.prefix, host) in _BASIC_REALMS

    def do_request(
        self,
        url: str,
        method: str = "GET",
        data: dict[str, Any] | bytes | None = None,
        headers: dict[str, str] | None = None,
        json: dict[str, Any] | None = None,
        stream: bool = False,
    ) -> requests.Response:
        """One request, one authentication round on 401/403, then the answer."""
        headers = dict(headers or {})
        if self._basic_preemptive and self._basic is not None:
            headers["Authorization"] = self._basic
        elif isinstance(self.auth, oras.auth.TokenAuth) and self.auth.token is not None:
            headers.update(self.auth.get_auth_header())

        def send() -> requests.Response:
            try:
                sent = headers or {}
                return self._send(method, url, data=data, json=json, headers=sent, stream=stream)
            except requests.exceptions.SSLError as error:
                raise RegistryError(
                    f"TLS handshake with {self.url.host} failed ({describe_transport(error)}); "
                    f"{self.hints.tls}"
                ) from None
            except requests.exceptions.RequestException as error:
                raise RegistryError(
                    f"cannot reach registry {self.url.host}: {describe_transport(error)}"
                ) from None

        response = send()
        if response.status_code in (401, 403):
            challenge = response.headers.get("WWW-Authenticate", "")
            if challenge.lower().startswith("basic"):
                # A registry behind plain basic auth (htpasswd): answer the
                # challenge ourselves; oras only speaks the token flow.
                if self._basic is None:
                    raise RegistryError(
                        f"registry {self.url.host} requires credentials ({self.hints.credentials})",
                        auth=True,
                    )
                headers["Authorization"] = self._basic
                self._basic_preemptive = True
                _BASIC_REALMS.add((self.prefix, self.hostname))
            else:
                try:
                    headers, _ = self.auth.authenticate_request(response, headers)
                except Exception as error:  # oras raises plain exceptions on failed token requests
                    raise RegistryError(
                        f"authentication to {self.url.host} failed: {describe_transport(error)}",
                        auth=True,
                    ) from None
            response = send()
        if response.status_code in (401, 403):
            raise RegistryError(
                f"authentication to {self.url.host} failed: "
                f"{describe_http_status(response.status_code)}",
                auth=True,
            )
        return response

    def _send(
        self,
        method: str,
        url: str,
        *,
        data: dict[str, Any] | bytes | None,
        json: dict[str, Any] | None,
        headers: dict[str, str],
        stream: bool,
    ) -> requests.Response:
        """`Session.request`, less what it would redo for every request of a pull.

        `Session.request` reads the process environment (proxies, a CA bundle)
        and `~/.netrc` anew for each request, and merges the session's empty
        cookie jar into a new one: a third of a registry request's CPU in the
        source-controller (issue 19). The environment does not change under a
        running process, so what it says for a scheme and host is asked once
        (`_environment`), with the same requests functions; the request is
        prepared as `Session.prepare_request` would (session headers and hooks
        merged, the session's jar, which refuses every cookie) and sent by
        `Session.send`, which still follows redirects (a blob store's) with its
        own checks.
        """
        auth, settings = _environment(self.session, url, self._tls_verify)
        prepared = requests.PreparedRequest()
        prepared.prepare(
            method=method.upper(),
            url=url,
            data=data or {},
            json=json,
            headers=requests.sessions.merge_setting(
                headers, self.session.headers, dict_class=requests.structures.CaseInsensitiveDict
            ),
            auth=requests.sessions.merge_setting(auth, self.session.auth),
            cookies=self.session.cookies,
            hooks=self.session.hooks,
        )
        answer: requests.Response = self.session.send(
            prepared, timeout=self.timeout, allow_redirects=True, stream=stream, **settings
        )
        return answer

    def list_tags(self) -> list[str]:
        """Every tag of the repository, following the `Link` pages, within bounds."""
        target: str | None = f"{self.prefix}://{self.container.tags_url()}"
        tags: list[str] = []
        while target is not None:
            response = self.do_request(target, "GET", stream=True)
            with response:
                if response.status_code != 200:
                    text = describe_http_status(response.status_code)
                    raise _status_error(text, self.url, not_found=response.status_code == 404)
                raw = _read_bounded(
                    response, MAX_TAGS_PAGE_SIZE, what="tag list page", host=self.url.host
                )
                link = _NEXT_LINK.search(response.headers.get("Link", ""))
            try:
                page = json.loads(raw).get("tags") or []
            except (ValueError, AttributeError):
                raise _status_error("the tag list is not JSON", self.url) from None
            tags += [str(t) for t in page]
            if len(tags) > MAX_TAGS:
                raise _status_error(f"more than the limit of {MAX_TAGS} tags", self.url)
            target = urljoin(target, link.group(1)) if link and page else None
        return tags

    def manifest(self, reference: str) -> Manifest:
        target = f"{self.prefix}://{self.container.manifest_url(reference)}"
        response = self.do_request(
            target, "GET", headers={"Accept": ", ".join(MANIFEST_TYPES)}, stream=True
        )
        with response:
            if response.status_code == 404:
                raise RegistryError(
                    f"artifact '{self.url.host}/{self.url.repository}:{reference}' not found",
                    not_found=True,
                )
            if response.status_code != 200:
                raise RegistryError(
                    f"manifest '{reference}' from {self.url.host}: "
                    f"{describe_http_status(response.status_code)}"
                )
            raw = _read_bounded(
                response, MAX_MANIFEST_SIZE, what=f"manifest '{reference}'", host=self.url.host
            )
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        if reference.startswith("sha256:") and reference != digest:
            raise RegistryError(f"manifest digest mismatch: asked {reference}, got {digest}")
        try:
            body = json.loads(raw)
        except ValueError:
            raise RegistryError(f"manifest '{reference}' is not JSON") from None
        if not isinstance(body, dict):
            raise RegistryError(f"manifest '{reference}' is not a JSON object")
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        return Manifest(
            digest=digest,
            body=body,
            raw=raw,
            media_type=str(body.get("mediaType") or media_type or MANIFEST_TYPES[0]),
        )

    def read_blob(self, digest: str, *, max_size: int) -> bytes:
        """A small blob's bytes (a signature payload), digest-checked."""
        with tempfile.TemporaryDirectory(prefix="oci-blob-") as tmp:
            path = Path(tmp) / "blob"
            self.download(digest, path, max_size=max_size)
            return path.read_bytes()

    def download(self, digest: str, dest: Path, *, max_size: int) -> None:
        """Stream a blob to `dest`, refusing a size above `max_size` or a wrong digest."""
        if not _DIGEST.match(digest):
            raise RegistryError(f"layer digest '{digest}' is not a sha256 digest")
        target = f"{self.prefix}://{self.container.get_blob_url(digest)}"
        response = self.do_request(target, "GET", stream=True)
        with response:
            if response.status_code != 200:
                raise RegistryError(
                    f"blob {digest} from {self.url.host}: "
                    f"{describe_http_status(response.status_code)}",
                    not_found=response.status_code == 404,
                )
            hasher = hashlib.sha256()
            size = 0
            with open(dest, "wb") as out:
                try:
                    for chunk in response.iter_content(chunk_size=1 << 16):
                        size += len(chunk)
                        if size > max_size:
                            raise RegistryError(f"layer {digest} is larger than {max_size} bytes")
                        hasher.update(chunk)
                        out.write(chunk)
                except requests.exceptions.RequestException as error:
                    # The body is streamed after do_request returned, so a
                    # transfer cut or stalled midway raises here, not there.
                    raise RegistryError(
                        f"blob {digest} from {self.url.host}: the download broke off after "
                        f"{size} bytes ({describe_transport(error)})"
                    ) from None
        actual = "sha256:" + hasher.hexdigest()
        if actual != digest:
            raise RegistryError(f"layer digest mismatch: expected {digest}, got {actual}")

    def has_blob(self, digest: str) -> bool:
        target = f"{self.prefix}://{self.container.get_blob_url(digest)}"
        response = self.do_request(target, "HEAD")
        with response:
            return response.status_code == 200

    def upload_blob(self, data: bytes, digest: str) -> None:
        """Upload `data` under `digest` in one request, unless the registry has it already.

        One monolithic PUT after the upload session's POST: the layers a CI
        pipeline pushes are manifests, small enough to hold in memory, and
        a body that is bytes can be sent again after an authentication round.
        """
        if self.has_blob(digest):
            return
        start = f"{self.prefix}://{self.container.upload_blob_url()}"
        response = self.do_request(start, "POST")
        with response:
            location = response.headers.get("Location", "")
            if response.status_code != 202 or not location:
                raise self._answered(response, f"starting the upload of blob {digest}")
        target = urljoin(start, location)
        target += ("&" if "?" in target else "?") + f"digest={digest}"
        response = self.do_request(
            target,
            "PUT",
            data=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        with response:
            if response.status_code != 201:
                raise self._answered(response, f"uploading blob {digest}")

    def put_manifest(self, reference: str, raw: bytes, media_type: str) -> str:
        """Store `raw` as the manifest under `reference` (a tag); its digest."""
        target = f"{self.prefix}://{self.container.manifest_url(reference)}"
        response = self.do_request(target, "PUT", data=raw, headers={"Content-Type": media_type})
        with response:
            if response.status_code != 201:
                raise self._answered(response, f"storing manifest '{reference}'")
        return "sha256:" + hashlib.sha256(raw).hexdigest()

    def _answered(self, response: requests.Response, doing: str) -> RegistryError:
        # The registry's own error text (distribution's `errors[].message`)
        # names the problem better than the status code alone.
        detail = ""
        try:
            errors = response.json().get("errors") or []
            detail = "; ".join(str(e.get("message", "")) for e in errors if isinstance(e, dict))
        except (ValueError, AttributeError):
            pass
        shown = f"HTTP {response.status_code}" + (f" ({detail})" if detail else "")
        return RegistryError(
            f"registry {self.url.host} answered {shown} {doing}",
            not_found=response.status_code == 404,
        )


_ENVIRONMENTS: dict[tuple[str, str, bool | str], tuple[Any, dict[str, Any]]] = {}
"""What the environment says for a scheme, host and TLS setting: the netrc login and
`Session.merge_environment_settings`' proxies, CA bundle and client certificate."""


def _environment(
    session: requests.Session, url: str, verify: bool | str
) -> tuple[Any, dict[str, Any]]:
    parts = urlsplit(url)
    key = (parts.scheme, parts.netloc, verify)
    found = _ENVIRONMENTS.get(key)
    if found is None:
        # Two threads may both compute it: the same answer, one of them kept.
        auth = requests.utils.get_netrc_auth(url) if session.trust_env else None
        settings = session.merge_environment_settings(url, {}, None, verify, None)
        settings.pop("stream", None)
        found = _ENVIRONMENTS[key] = (auth, settings)
    return found


def _read_bounded(response: requests.Response, limit: int, *, what: str, host: str) -> bytes:
    """The body of a streamed `response`, refusing more than `limit` bytes."""
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > limit:
        raise RegistryError(f"{what} is {declared} bytes, more than the limit of {limit}")
    body = bytearray()
    try:
        for chunk in response.iter_content(chunk_size=1 << 16):
            body += chunk
            if len(body) > limit:
                raise RegistryError(f"{what} is larger than the limit of {limit} bytes")
    except requests.exceptions.RequestException as error:
        # Streamed: a body cut off or stalled midway fails here, after do_request.
        raise RegistryError(
            f"{what} from {host}: the download broke off after {len(body)} bytes "
            f"({describe_transport(error)})"
        ) from None
    return bytes(body)


def _status_error(text: str, url: OCIURL, *, not_found: bool = False) -> RegistryError:
    return RegistryError(
        f"listing tags of {url.host}/{url.repository}: {text}", not_found=not_found
    )
