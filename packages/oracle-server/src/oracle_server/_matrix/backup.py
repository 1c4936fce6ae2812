"""Backup and restore of each user's SQLite database through Matrix (SRV-60 … 63).

Each user's file is uploaded to their room as a chain of sealed blobs (see
:mod:`oracle_server._persistence.snapshot`): a full snapshot, then page deltas, so a turn's
backup costs about the pages the turn changed rather than the whole database. Each
upload is a media upload plus an ``m.ixo.media_upload`` timeline event; the room state
``m.ixo.media_state`` / ``<storageKey>`` then points at the chain, and only after that
are superseded events redacted. Blobs are sealed with a key derived from the oracle's
signing key, so a new node with the same identity restores them without the megolm keys
of the node that wrote them, and the homeserver only ever stores ciphertext.

Uploads are debounced after turns, retried with backoff when the homeserver fails, run
for every changed file at shutdown, and idle users are uploaded and then removed from
local disk.

Only a backup that is positively absent (no pointer in the room, or media the homeserver
says is gone) lets a user start empty. Any other restore failure (the homeserver down,
blobs that do not decrypt under this node's key, a full disk) raises
:class:`StorageUnavailableError` ``storage.restore_failed``, writes no local file and
leaves the pointer and the chain as they are, so an empty database can never replace a
backup that is only unreadable for now; later requests try again, with backoff.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oracle_server._matrix.client import MatrixClient, MatrixError
from oracle_server._matrix.rooms import UserRooms
from oracle_server._persistence import (
    MatrixFileEvent,
    MatrixFileEvents,
    StorageUnavailableError,
    UserDatabases,
    snapshot,
)

__all__ = ["BackupFigures", "CheckpointBackup"]

logger = logging.getLogger("oracle.server.matrix.backup")

STATE_TYPE = "m.ixo.media_state"
UPLOAD_TYPE = "m.ixo.media_upload"
FORMAT = "oracle-sqlite-chain/1"
REDACT_REASON = "Replacing with updated file"
MAX_RETRY_DELAY = 300.0
RESTORE_FAILED = "storage.restore_failed"
# The first wait before a failed restore is tried again; it doubles up to MAX_RETRY_DELAY.
RESTORE_RETRY_DELAY = 5.0


@dataclass
class BackupFigures:
    """Counters for tests, benchmarks and logs."""

    uploads: int = 0
    full_uploads: int = 0
    bytes_uploaded: int = 0
    skipped_unchanged: int = 0
    failures: int = 0
    restores: int = 0
    restore_failures: int = 0
    bytes_downloaded: int = 0


class _Unreadable(Exception):
    """A backup exists but could not be read; ``cause`` is the stable reason."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


@dataclass
class _RestoreFailure:
    attempts: int
    retry_at: float
    cause: str

    def error(self, now: float) -> StorageUnavailableError:
        return StorageUnavailableError(
            f"the backup could not be read ({self.cause})",
            code=RESTORE_FAILED,
            retry_after=max(self.retry_at - now, 1.0),
        )


@dataclass
class _Pending:
    first: float
    due: float
    attempt: int = 0
    task: asyncio.Task[None] | None = None


class CheckpointBackup:
    """Uploads users' databases to their Matrix rooms and restores them.

    It is the :class:`~oracle_server._persistence.UserRestorer` of the user databases.

    Args:
        client: The oracle's Matrix client.
        rooms: The users' rooms.
        databases: The per-user databases it backs up.
        files: The last upload of each storage key (server database).
        secret: The oracle's backup secret (from its signing key); blobs are sealed with
            a key derived from it per storage key.
        debounce: Seconds of quiet after a turn before the upload starts.
        max_delay: Longest wait after the first turn of a busy spell.
        idle_seconds: Users idle this long are uploaded and removed from local disk.
        restore_retry_delay: Seconds before a failed restore is tried again (doubling
            with each failure, up to five minutes); requests meanwhile answer 503 at once.
        clock: Monotonic seconds.
    """

    def __init__(
        self,
        client: MatrixClient,
        rooms: UserRooms,
        databases: UserDatabases,
        files: MatrixFileEvents,
        *,
        secret: Callable[[], bytes | None],
        debounce: float = 30.0,
        max_delay: float = 300.0,
        idle_seconds: float = 3600.0,
        restore_retry_delay: float = RESTORE_RETRY_DELAY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.rooms = rooms
        self.databases = databases
        self.files = files
        self._secret = secret
        self.debounce = debounce
        self.max_delay = max(max_delay, debounce)
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._pending: dict[str, _Pending] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._restoring: dict[str, asyncio.Task[bool]] = {}
        self._restore_failures: dict[str, _RestoreFailure] = {}
        self.restore_retry_delay = restore_retry_delay
        self._janitor: asyncio.Task[None] | None = None
        self._closed = False
        self.figures = BackupFigures()

    # --- keys and paths --------------------------------------------------------------

    def key_for(self, storage_key: str) -> bytes:
        """The sealing key of a storage key (from the oracle's signing key)."""
        secret = self._secret()
        if secret is None:
            raise StorageUnavailableError("the oracle's signing key is not loaded yet")
        return snapshot.backup_key(secret, storage_key)

    @staticmethod
    def index_path(db_path: Path) -> Path:
        """The sidecar index of a database: its last uploaded state."""
        return db_path.with_suffix(".backup-index")

    def _lock(self, user_did: str) -> asyncio.Lock:
        return self._locks.setdefault(user_did, asyncio.Lock())

    # --- restore (UserRestorer) ------------------------------------------------------

    async def restore(self, user_did: str, storage_key: str, dest: Path) -> bool:
        """Restore the user's database at ``dest``; concurrent calls share one restore.

        Returns ``False`` only for a backup that is positively absent (a new user): no
        pointer in their room, or media the homeserver says is gone.

        Raises:
            StorageUnavailableError: ``storage.restore_failed``: a backup exists but could
                not be read (the homeserver failed, the blobs do not decrypt or check out,
                the disk is full…). No file is written and the pointer is kept; the next
                request after a backoff tries again.
        """
        failure = self._restore_failures.get(user_did)
        if failure is not None and self._clock() < failure.retry_at:
            raise failure.error(self._clock())
        task = self._restoring.get(user_did)
        if task is None:
            task = asyncio.get_running_loop().create_task(
                self._restore_or_record(user_did, storage_key, dest),
                name=f"matrix-restore:{storage_key}",
            )
            self._restoring[user_did] = task
            task.add_done_callback(lambda _t: self._restoring.pop(user_did, None))
        restored = await asyncio.shield(task)
        if not restored:
            # A local index without a backup behind it would make the next upload a
            # delta on a chain that is gone.
            self.index_path(dest).unlink(missing_ok=True)
        return restored

    async def _restore_or_record(self, user_did: str, storage_key: str, dest: Path) -> bool:
        try:
            restored = await self._restore(user_did, storage_key, dest)
        except _Unreadable as exc:
            previous = self._restore_failures.get(user_did)
            attempts = 1 if previous is None else previous.attempts + 1
            delay = min(self.restore_retry_delay * 2 ** (attempts - 1), MAX_RETRY_DELAY)
            failure = _RestoreFailure(attempts, self._clock() + delay, exc.cause)
            self._restore_failures[user_did] = failure
            self.figures.restore_failures += 1
            logger.error(
                "matrix.restore_failed: the backup of %s could not be read (%s); it is kept "
                "untouched and the user's requests answer 503 until a retry in %.0f s succeeds",
                storage_key,
                exc.cause,
                delay,
            )
            raise failure.error(self._clock()) from exc.__cause__
        self._restore_failures.pop(user_did, None)
        return restored

    async def _restore(self, user_did: str, storage_key: str, dest: Path) -> bool:
        # Whatever goes wrong, nothing in the room is touched: a backup that cannot be
        # read today (a wrong key, a full disk, a homeserver down) is the user's data.
        try:
            pointer = await self._pointer(user_did, storage_key)
            if pointer is None:
                return False
            for attempt in (1, 2):
                try:
                    await self._restore_chain(pointer, storage_key, dest)
                except snapshot.SnapshotError as exc:
                    if exc.code == "snapshot.integrity_failed" and attempt == 1:
                        logger.warning("matrix.restore_retry: %s; downloading again", exc.code)
                        continue
                    raise _Unreadable(exc.code) from exc
                self.figures.restores += 1
                return True
        except MatrixError as exc:
            if exc.code == "M_NOT_FOUND":
                logger.warning(
                    "matrix.restore_absent: the media of the backup of %s is gone; the user "
                    "starts with an empty database",
                    storage_key,
                )
                return False
            raise _Unreadable(exc.code) from exc
        except StorageUnavailableError as exc:  # the signing key is not loaded yet
            raise _Unreadable(exc.code) from exc
        except OSError as exc:
            raise _Unreadable(f"os.{type(exc).__name__}") from exc
        except (KeyError, TypeError, ValueError) as exc:
            raise _Unreadable("matrix.restore_bad_pointer") from exc
        return False

    async def _pointer(self, user_did: str, storage_key: str) -> dict[str, Any] | None:
        cached = await self.files.get(storage_key)
        if cached is not None and cached.event.get("format") == FORMAT:
            return cached.event
        room_id = await self.rooms.find(user_did)
        if room_id is None:
            return None
        content = await self.client.state_event(room_id, STATE_TYPE, storage_key)
        if not content:
            return None  # never written, or emptied: no backup
        if content.get("format") != FORMAT or not content.get("chain"):
            # A pointer this node cannot read (a newer format?) is still someone's data.
            raise _Unreadable("matrix.restore_unknown_format")
        return content

    async def _restore_chain(self, pointer: dict[str, Any], storage_key: str, dest: Path) -> None:
        chain = pointer["chain"]
        blobs = []
        for link in chain:
            blob = await self.client.download(str(link["url"]))
            self.figures.bytes_downloaded += len(blob)
            blobs.append(blob)
        await asyncio.to_thread(
            snapshot.restore,
            blobs,
            dest,
            key=self.key_for(storage_key),
            storage_key=storage_key,
            expected_sha256=str(pointer["sha256"]),
            index_path=self.index_path(dest),
            blob_ids=[str(link["url"]) for link in chain],
        )
        await self.files.put(
            MatrixFileEvent(storage_key, str(pointer["eventId"]), pointer, str(pointer["sha256"]))
        )

    # --- upload ----------------------------------------------------------------------

    def schedule(self, user_did: str) -> None:
        """Upload the user's database after ``debounce`` seconds without another turn."""
        if self._closed:
            return
        now = self._clock()
        pending = self._pending.get(user_did)
        if pending is None:
            pending = self._pending[user_did] = _Pending(first=now, due=now + self.debounce)
        else:
            pending.due = min(now + self.debounce, pending.first + self.max_delay)
        if pending.task is None or pending.task.done():
            pending.task = asyncio.get_running_loop().create_task(
                self._upload_when_due(user_did), name="matrix-backup"
            )

    def pending_users(self) -> list[str]:
        """Users with an upload scheduled or being retried."""
        return list(self._pending)

    async def _upload_when_due(self, user_did: str) -> None:
        while True:
            pending = self._pending.get(user_did)
            if pending is None or self._closed:
                return
            wait = pending.due - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            try:
                await self.upload(user_did)
            except Exception as exc:
                pending.attempt += 1
                delay = min(self.debounce * 2 ** min(pending.attempt, 10), MAX_RETRY_DELAY)
                pending.due = self._clock() + max(delay, 1.0)
                logger.warning(
                    "matrix.upload_failed: %s; retrying in %.1f s",
                    getattr(exc, "code", type(exc).__name__),
                    delay,
                )
                continue
            self._pending.pop(user_did, None)
            return

    async def upload(self, user_did: str) -> bool:
        """Upload the user's database now if it changed; ``True`` when something was sent.

        Raises:
            MatrixError: the homeserver failed; nothing was recorded, retry later.
        """
        async with self._lock(user_did):
            return await self._upload_locked(user_did)

    async def _upload_locked(self, user_did: str) -> bool:
        path = self.databases.path_for(user_did)
        if not path.exists():
            return False
        storage_key = self.databases.storage_key(user_did)
        key = self.key_for(storage_key)
        index_path = self.index_path(path)
        try:
            prepared = await asyncio.to_thread(
                snapshot.prepare_upload, path, index_path, key=key, storage_key=storage_key
            )
        except BaseException:
            self.figures.failures += 1
            raise
        if prepared is None:
            self.figures.skipped_unchanged += 1
            return False
        try:
            await self._send(user_did, storage_key, index_path, prepared)
        except BaseException:
            self.figures.failures += 1
            raise
        return True

    async def _send(
        self, user_did: str, storage_key: str, index_path: Path, prepared: snapshot.Prepared
    ) -> None:
        room_id = await self.rooms.ensure(user_did)
        filename = f"{storage_key}.{prepared.kind}"
        url = await self.client.upload(
            prepared.blob, content_type="application/octet-stream", filename=filename
        )
        event_id = await self.client.send(
            room_id,
            UPLOAD_TYPE,
            {
                "msgtype": "m.file",
                "body": filename,
                "filename": filename,
                "cid": storage_key,
                "sender": self.client.user_id,
                "url": url,
                "info": {"mimetype": "application/x-sqlite3", "size": len(prepared.blob)},
                "ixo.snapshot": {
                    "format": FORMAT,
                    "kind": prepared.kind,
                    "sha256": prepared.sha256,
                },
            },
        )
        previous = await self.files.get(storage_key)
        events = {
            str(link.get("url")): link.get("eventId")
            for link in (previous.event.get("chain", []) if previous else [])
        }
        chain = [
            {
                "url": link.blob_id,
                "eventId": events.get(link.blob_id),
                "kind": link.kind,
                "sha256": link.sha256,
                "size": link.size,
            }
            for link in prepared.index.chain
        ]
        chain.append(
            {
                "url": url,
                "eventId": event_id,
                "kind": prepared.kind,
                "sha256": prepared.sha256,
                "size": len(prepared.blob),
            }
        )
        pointer = {"format": FORMAT, "eventId": event_id, "sha256": prepared.sha256, "chain": chain}
        await self.client.put_state(room_id, STATE_TYPE, pointer, storage_key)
        superseded = snapshot.commit_upload(index_path, prepared, blob_id=url)
        await self.files.put(MatrixFileEvent(storage_key, event_id, pointer, prepared.sha256))
        self.figures.uploads += 1
        self.figures.full_uploads += prepared.kind == "full"
        self.figures.bytes_uploaded += len(prepared.blob)
        for link in superseded:
            old_event = events.get(link.blob_id)
            if old_event:
                try:
                    await self.client.redact(room_id, str(old_event), REDACT_REASON)
                except MatrixError as exc:
                    logger.warning("matrix.redact_failed: %s", exc.code)

    # --- schedules -------------------------------------------------------------------

    def start(self, *, interval: float = 600.0) -> None:
        """Start the idle-user janitor (every ``interval`` seconds)."""
        if self._janitor is None:
            self._janitor = asyncio.get_running_loop().create_task(
                self._janitor_loop(interval), name="matrix-backup-janitor"
            )

    async def _janitor_loop(self, interval: float) -> None:
        while not self._closed:
            await asyncio.sleep(interval)
            try:
                await self.retire_idle()
            except Exception:
                logger.exception("matrix.janitor_failed")

    async def retire_idle(self) -> list[str]:
        """Upload users idle for ``idle_seconds`` and remove their local files (SRV-62)."""
        retired = []
        for user_did in self.databases.open_users():
            idle = self.databases.idle_for(user_did)
            if idle is None or idle < self.idle_seconds or self.databases.is_in_use(user_did):
                continue
            if user_did in self._pending:
                continue

            async def upload_final(_path: Path, did: str = user_did) -> None:
                await self._upload_locked(did)

            async with self._lock(user_did):
                try:
                    removed = await self.databases.remove_user(user_did, before_remove=upload_final)
                except Exception as exc:
                    logger.warning(
                        "matrix.retire_failed: %s; keeping the local file",
                        getattr(exc, "code", type(exc).__name__),
                    )
                    continue
            if removed:
                retired.append(user_did)
        return retired

    async def flush(self) -> None:
        """Upload every user with a scheduled upload now (shutdown, SRV-12 step 3)."""
        for user_did in list(self._pending):
            pending = self._pending.pop(user_did, None)
            if pending is not None and pending.task is not None:
                pending.task.cancel()
            try:
                await self.upload(user_did)
            except Exception as exc:
                logger.error(
                    "matrix.final_upload_failed: %s; the local file is kept for the next start",
                    getattr(exc, "code", type(exc).__name__),
                )

    async def aclose(self) -> None:
        """Stop the schedules (call :meth:`flush` first to upload pending changes)."""
        self._closed = True
        tasks = [p.task for p in self._pending.values() if p.task is not None]
        if self._janitor is not None:
            tasks.append(self._janitor)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
