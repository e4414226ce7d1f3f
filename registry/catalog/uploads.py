"""Bundles uploaded in the web UI, held between the import plan and "Apply" (``ui_uploads``).

The plan page is one click away from applying, so the upload must stay on the server until then
(a browser cannot be asked to send a file again unprompted, and the plan itself is never taken
back from it). It is kept in the database rather than in the process or on its disk: behind a
load balancer without affinity, the plan and the apply may reach different replicas.

Bounded: each upload is at most ``REGISTRY_LIMIT_BUNDLE_BYTES`` (checked before it gets here), a
UI session holds one at a time (a new upload replaces it), and each is dropped after ``TTL``, or
when it is applied or discarded. Expired ones are removed whenever a new one is stored.

An upload belongs to the UI session that made it: it is found by its random id *and* its owner,
a digest of that session's CSRF secret, so another session (or person) who learns the id finds
nothing.
"""

from __future__ import annotations

import hashlib
import secrets
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select

from registry.catalog.web_sessions import SignedIn
from registry.db.engine import Database
from registry.db.models import UiUpload

#: How long an uploaded bundle waits for "Apply".
TTL = timedelta(minutes=30)
#: Longest file name kept (it names the bundle in the change notes).
FILENAME_CHARS = 100


@dataclass(frozen=True)
class Upload:
    id: str
    filename: str
    content: bytes
    created_at: datetime
    expires_at: datetime


def owner_of(ui: SignedIn) -> str:
    return hashlib.sha256(b"mcpr-ui-upload\0" + ui.csrf_token.encode()).hexdigest()


def clean_filename(name: str | None) -> str:
    """The uploaded file's own name, without folders or control characters (``bundle.zip`` when none)."""
    base = (name or "").replace("\\", "/").rsplit("/", 1)[-1]
    base = "".join(c for c in base if unicodedata.category(c)[0] != "C").strip()
    return base[:FILENAME_CHARS] or "bundle.zip"


class UploadStore:
    """The web UI's held bundle uploads (rows of ``ui_uploads``), reached through ``registry.api.deps.UploadsDep``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def put(self, ui: SignedIn, filename: str, content: bytes) -> str:
        """Store ``content`` for ``ui``'s session (replacing its earlier upload); returns its id."""
        now = datetime.now(UTC)
        owner = owner_of(ui)
        upload_id = secrets.token_urlsafe(24)
        with self.db.session() as session:
            session.execute(delete(UiUpload).where((UiUpload.expires_at <= now) | (UiUpload.owner == owner)))
            session.add(
                UiUpload(
                    id=upload_id,
                    owner=owner,
                    filename=clean_filename(filename),
                    content=content,
                    created_at=now,
                    expires_at=now + TTL,
                )
            )
        return upload_id

    def get(self, ui: SignedIn, upload_id: str) -> Upload | None:
        if not upload_id or len(upload_id) > 64:
            return None
        with self.db.session() as session:
            row = session.scalar(select(UiUpload).where(UiUpload.id == upload_id, UiUpload.owner == owner_of(ui)))
            if row is None:
                return None
            found = Upload(row.id, row.filename, row.content, row.created_at, row.expires_at)
        if found.expires_at <= datetime.now(UTC):
            return None
        return found

    def discard(self, ui: SignedIn, upload_id: str) -> None:
        with self.db.session() as session:
            session.execute(delete(UiUpload).where(UiUpload.id == upload_id, UiUpload.owner == owner_of(ui)))
