"""A client of a running registry's bundle API (``/api/v1/bundles``), for ``mcp-registry plan``,
``push`` and ``pull``.

Every way a call can fail becomes one ``RemoteError`` whose message names the server and says what
happened in words a CI log reader acts on: the server cannot be reached (refused, unknown host, TLS,
timeout), it refused the token (401) or the operation (403), the bundle is too large (413, naming
the limit), invalid (422, every problem with its file and line), or the catalog moved (409). httpx
is already the project's HTTP client; calls are bounded by a timeout. TLS is verified against
certifi's CA bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set (httpx reads them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from registry import __version__

#: Folders of a bundle that hold entry files, and the manifest.
ENTRY_FOLDERS = ("prompts", "resources", "tools")
HISTORY = "history"
MANIFEST = "export.yaml"
#: Where the bundle API lives under the registry's base URL.
API = "/api/v1/bundles"
#: Connecting and each read or write of a call; a plan of a large bundle takes a while.
DEFAULT_TIMEOUT_S = 60.0
_TLS = re.compile(r"SSL|TLS|CERTIFICATE", re.IGNORECASE)


class RemoteError(Exception):
    """A call to the registry failed; the message says why."""


def bundle_paths(directory: Path, *, top_level: tuple[str, ...] = (MANIFEST,)) -> list[Path]:
    """The bundle files of ``directory``: ``top_level`` files (the manifest), then the YAML files of
    ``prompts/``, ``resources/``, ``tools/`` (and of ``history/``'s). ``RemoteError`` for a symbolic
    link among them or their folders: ``plan``/``push`` read these files and ``pull --force``
    replaces them, and a link would make them read or delete files elsewhere (a pull request could
    commit ``prompts/x.yaml -> /proc/self/environ`` for CI to send)."""
    paths = [directory / name for name in top_level if (directory / name).is_file() or (directory / name).is_symlink()]
    folders = [base / folder for base in (directory, directory / HISTORY) for folder in ENTRY_FOLDERS]
    for folder in [directory / HISTORY, *folders]:
        if folder.is_symlink():
            raise RemoteError(
                f"{folder} is a symbolic link: a bundle's folders must be real folders inside {directory}"
            )
    for folder in folders:
        if folder.is_dir():
            paths += sorted(
                p for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and (p.is_file() or p.is_symlink())
            )
    links = [p for p in paths if p.is_symlink()]
    if links:
        shown = ", ".join(str(p) for p in links[:5])
        raise RemoteError(f"symbolic links are not bundle files: {shown}")
    return paths


def read_bundle(directory: Path) -> dict[str, str]:
    """The bundle files of ``directory`` (relative path -> text; see ``bundle_paths``); anything
    else is left out."""
    if not directory.is_dir():
        raise RemoteError(f"bundle folder {directory} does not exist")
    files: dict[str, str] = {}
    for path in bundle_paths(directory):
        relative = path.relative_to(directory).as_posix()
        try:
            files[relative] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise RemoteError(f"{path}: not UTF-8 text") from None
    if not any(name != MANIFEST for name in files):
        raise RemoteError(f"{directory} holds no prompts/, resources/ or tools/ YAML files")
    return files


def _problem(response: httpx.Response) -> tuple[str, list[dict[str, Any]]]:
    """The detail and the listed problems of an error answer (problem+json), or its first text."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:300].strip() or response.reason_phrase, []
    if not isinstance(body, dict):
        return str(body)[:300], []
    detail = str(body.get("detail") or body.get("title") or response.reason_phrase)
    errors = body.get("errors")
    return detail, errors if isinstance(errors, list) else []


@dataclass
class Remote:
    """The bundle API of the registry at ``url`` (its base, e.g. ``https://registry.example.com``)."""

    url: str
    token: str
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        self.url = self.url.rstrip("/")

    def plan(self, files: dict[str, str]) -> dict[str, Any]:
        return self._call("POST", "/plan", json={"files": files})

    def apply(self, files: dict[str, str], fingerprint: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"files": files}
        if fingerprint:
            body["fingerprint"] = fingerprint
        return self._call("POST", "/apply", json=body)

    def export(self, *, label: str | None = None, all_versions: bool = False) -> dict[str, Any]:
        params: dict[str, str] = {}
        if label:
            params["label"] = label
        if all_versions:
            params["all_versions"] = "true"
        return self._call("GET", "/export", params=params)

    def schema(self) -> dict[str, Any]:
        return self._call("GET", "/schema.json")

    def link(self, path: str) -> str:
        """An absolute URL for a path the server answered (a change request's page)."""
        return path if "://" in path else self.url + "/" + path.lstrip("/")

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        where = self.url
        headers = {"Authorization": f"Bearer {self.token}", "User-Agent": f"mcp-registry/{__version__}"}
        try:
            with httpx.Client(timeout=self.timeout_s, headers=headers) as client:
                response = client.request(method, self.url + API + path, **kwargs)
        except httpx.TimeoutException:
            raise RemoteError(f"the registry at {where} did not answer within {self.timeout_s:g} s (timeout)") from None
        except httpx.ConnectError as exc:
            raise RemoteError(f"cannot reach the registry at {where}: {_why(exc)}") from None
        except httpx.InvalidURL as exc:
            raise RemoteError(f"{where} is not a registry URL: {exc}") from None
        except httpx.UnsupportedProtocol:
            raise RemoteError(f"{where} is not a registry URL: give http://... or https://...") from None
        except httpx.HTTPError as exc:
            raise RemoteError(f"the call to the registry at {where} failed: {exc}") from None
        if response.is_success:
            try:
                body = response.json()
            except ValueError:
                raise RemoteError(f"the server at {where} did not answer JSON: is it an mcp-registry?") from None
            if not isinstance(body, dict):
                raise RemoteError(f"the server at {where} answered an unexpected body: is it an mcp-registry?")
            return body
        raise _refusal(where, response)


def _why(exc: httpx.ConnectError) -> str:
    text = str(exc)
    if "refused" in text.lower():
        return "connection refused"
    if _TLS.search(text):
        return f"TLS failed ({text}); set SSL_CERT_FILE to the CA bundle that signed its certificate"
    if "name or service not known" in text.lower() or "nodename nor servname" in text.lower():
        return "unknown host name"
    return text or type(exc).__name__


def _refusal(where: str, response: httpx.Response) -> RemoteError:
    status = response.status_code
    detail, errors = _problem(response)
    if "\n" not in detail:  # the bundle's problems are listed in the detail already; others in errors
        shown = [e for e in errors[:20] if isinstance(e, dict) and e.get("msg")]
        detail += "".join(f"\n  {e.get('loc') or '(body)'}: {e['msg']}" for e in shown)
    if status == 401:
        return RemoteError(f"the registry at {where} refused the token (401): {detail}")
    if status == 403:
        return RemoteError(f"the registry at {where} refused this to the token (403): {detail}")
    if status == 404:
        return RemoteError(f"the server at {where} has no bundle API (404): is it an mcp-registry of this version?")
    if status == 409:
        return RemoteError(f"the registry at {where} refused the bundle (409): {detail}")
    if status == 413:
        return RemoteError(f"the bundle is too large for the registry at {where} (413): {detail}")
    if status in (400, 422):
        return RemoteError(f"the registry at {where} refused the bundle ({status}): {detail}")
    return RemoteError(f"the registry at {where} failed ({status}): {detail}")
