"""A minimal Kubernetes REST client over urllib, for bringing the cluster up: importing the
kubernetes package costs about a second, which a no-op `etj cluster up` should not pay."""
from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml


class ApiError(RuntimeError):
    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:500]}")
        self.status = status


class KubeApi:
    def __init__(self, server: str, ca_file: Path, cert_file: Path, key_file: Path,
                 timeout: float = 10.0) -> None:
        self.server = server.rstrip("/")
        self.timeout = timeout
        self._ctx = ssl.create_default_context(cafile=str(ca_file))
        self._ctx.load_cert_chain(str(cert_file), str(key_file))

    def request(self, method: str, path: str, body: bytes | None = None,
                content_type: str = "application/json") -> Any:
        req = urllib.request.Request(self.server + path, data=body, method=method)
        if body is not None:
            req.add_header("Content-Type", content_type)
        req.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(req, context=self._ctx, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raise ApiError(err.code, method, path, err.read().decode(errors="replace")) from None
        text = raw.decode()
        if not text:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def create(self, path: str, obj: dict[str, Any], dry_run: bool = False) -> Any:
        query = "?dryRun=All" if dry_run else ""
        return self.request("POST", path + query, json.dumps(obj).encode())

    def apply(self, path: str, obj: dict[str, Any] | str, manager: str = "etj-localcluster") -> Any:
        """Server-side apply (the JobSet CRD is ~800 KB: too big for client-side apply's
        last-applied annotation)."""
        body = obj if isinstance(obj, str) else yaml.safe_dump(obj)
        return self.request(
            "PATCH", f"{path}?fieldManager={manager}&force=true", body.encode(),
            content_type="application/apply-patch+yaml",
        )
