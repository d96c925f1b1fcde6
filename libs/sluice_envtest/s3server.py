"""An S3 server on loopback: moto's server mode, with real request signing checked.

moto answers the S3 API as AWS does (ListObjectsV2 pages, ETags, error
codes). Started plainly it accepts any credentials; here it enforces
signatures from the start: the first three requests (uncounted by moto's
`INITIAL_NO_AUTH_ACTION_COUNT`) create an IAM user with an S3 policy and its
access key, the only credentials the server accepts afterwards, so a wrong
secret key is refused as AWS refuses it.

The server logs one line per request (werkzeug's access log), so tests
count listings of a bucket without asking the controller.
"""

from __future__ import annotations

import json
import re
import socket
import sys
from pathlib import Path
from typing import Any

import botocore.session
from botocore.config import Config

from sluice_envtest.certificates import make_serving_pki
from sluice_envtest.controlplane import free_port
from sluice_envtest.processes import ChildServer, spawn

REGION = "us-east-1"
_SETUP_ACTIONS = 3
_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
}


class S3Server(ChildServer):
    """moto's S3 on http(s)://127.0.0.1:PORT; `access_key`/`secret_key` are the valid ones."""

    name = "moto-s3"

    def __init__(self, *, workdir: Path | None = None, tls: bool = False) -> None:
        super().__init__(workdir, prefix="sluice-s3-", log_name="s3.log")
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.tls = tls
        self.url = f"{'https' if tls else 'http'}://{self.endpoint}"
        self.access_key = ""
        self.secret_key = ""
        self.ca_pem: bytes | None = None
        self.ca_file: Path | None = None
        self._s3: Any = None

    def start(self, *, timeout: float = 30.0) -> None:
        argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        if self.tls:
            pki = make_serving_pki()
            paths = pki.write(self.workdir)
            self.ca_pem = pki.ca.cert
            self.ca_file = paths["ca.crt"]
            argv += ["-c", str(paths["tls.crt"]), "-k", str(paths["tls.key"])]
        env = {
            "PATH": "/usr/bin:/bin",
            "PYTHONUNBUFFERED": "1",
            "INITIAL_NO_AUTH_ACTION_COUNT": str(_SETUP_ACTIONS),
            "MOTO_ALLOW_NONEXISTENT_REGION": "true",
        }
        process = spawn(argv, log=self.log_file, env=env, cwd=self.workdir)
        # A TCP probe, not a request: every request counts against the
        # unauthenticated allowance the user set-up below needs.
        self._launched(process, self._listening, timeout=timeout)
        iam = self._client("iam", access_key="setup", secret_key="setup")  # noqa: S106
        iam.create_user(UserName="sluice")
        iam.put_user_policy(UserName="sluice", PolicyName="s3", PolicyDocument=json.dumps(_POLICY))
        key = iam.create_access_key(UserName="sluice")["AccessKey"]
        self.access_key = key["AccessKeyId"]
        self.secret_key = key["SecretAccessKey"]

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def _client(self, service: str, *, access_key: str, secret_key: str) -> Any:
        return botocore.session.get_session().create_client(
            service,
            region_name=REGION,
            endpoint_url=self.url,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            verify=str(self.ca_file) if self.ca_file else None,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
        )

    def client(self) -> Any:
        """A synchronous botocore S3 client with the valid credentials (made once: it is slow)."""
        if self._s3 is None:
            self._s3 = self._client("s3", access_key=self.access_key, secret_key=self.secret_key)
        return self._s3

    def create_bucket(self, name: str, files: dict[str, str | bytes] | None = None) -> None:
        self.client().create_bucket(Bucket=name)
        for key, content in (files or {}).items():
            self.put(name, key, content)

    def put(self, bucket: str, key: str, content: str | bytes) -> None:
        body = content.encode() if isinstance(content, str) else content
        self.client().put_object(Bucket=bucket, Key=key, Body=body)

    def delete(self, bucket: str, key: str) -> None:
        self.client().delete_object(Bucket=bucket, Key=key)

    def secret_data(self) -> dict[str, str]:
        """A Bucket's `secretRef` data, in Flux's key names."""
        return {"accesskey": self.access_key, "secretkey": self.secret_key}

    def requests(self, bucket: str) -> list[str]:
        """The request lines (`GET /bucket?list-type=2...`) the server answered for `bucket`."""
        line = re.compile(rf'"([A-Z]+ /{re.escape(bucket)}(?:[/?][^ ]*)? HTTP/[0-9.]+)"')
        # Refused requests are logged in colour; the codes go before matching.
        text = re.sub(r"\x1b\[[0-9;]*m", "", self.log_file.read_text(errors="replace"))
        return line.findall(text)

    def listings(self, bucket: str) -> int:
        """How many ListObjects pages of `bucket` the server answered."""
        return sum(
            1 for r in self.requests(bucket) if r.startswith(f"GET /{bucket}?") and "list-type" in r
        )

    def downloads(self, bucket: str) -> list[str]:
        """The keys of `bucket` fetched with GetObject, in order."""
        keys = []
        for request in self.requests(bucket):
            method, path, _ = request.split(" ")
            if method == "GET" and path.startswith(f"/{bucket}/"):
                keys.append(path.removeprefix(f"/{bucket}/").split("?", 1)[0])
        return keys
