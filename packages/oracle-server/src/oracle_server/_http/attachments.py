"""A message's ``attachments`` fetched and turned into the model's message, or a 422.

Each attachment names its bytes one of two ways: ``mxcUri`` (media on the user's
homeserver, or uploaded with ``POST /attachments``) or ``eventId`` (a file event in the
session's room, decrypted when the room is encrypted). Both are fetched through the
runtime's Matrix service as the user, so a user reaches only media they could reach
anyway. ``http(s)://`` URIs are refused: the server fetching addresses a client names
would let any user make it call inside its own network.

Everything is fetched and checked before the turn starts, so a refused attachment
answers 422 with its name and costs nothing: no turn, no stored message.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import HumanMessage

from oracle_core import (
    AttachmentError,
    AttachmentFile,
    AttachmentLimits,
    MatrixAccessor,
    MatrixRequestError,
    NotConfiguredError,
    ServiceUnavailableError,
    attachment_kind,
    attachment_message,
)
from oracle_server._errors import HTTPError
from oracle_server._http.dto import AttachmentDto

__all__ = ["IMAGE_MAX_BYTES", "prepared_message"]

IMAGE_MAX_BYTES = AttachmentLimits().max_image_bytes
"""Images are sent whole (base64) with every later turn of the thread: kept small."""


def _refused(item: AttachmentDto, message: str, code: str, status: int = 422) -> HTTPError:
    return HTTPError(status, f"Attachment {item.filename!r}: {message}", code=code)


async def _event_media(
    matrix: MatrixAccessor, room_id: str | None, item: AttachmentDto
) -> tuple[str, dict[str, Any] | None]:
    """The ``mxc://`` URI (and encryption) of a file event in the session's room."""
    assert item.event_id is not None
    room = room_id
    if room is None:
        with contextlib.suppress(NotConfiguredError):  # the local store has no user rooms
            room = await matrix.user_room_id()
    if room is None:
        raise _refused(item, "the session has no room to find the event in", "attachment.not_found")
    event = await matrix.get_event_by_id(room, item.event_id)
    source = (event or {}).get("decrypted", event) or {}
    content = source.get("content") if isinstance(source, dict) else None
    if not isinstance(content, dict):
        raise _refused(item, "no such event in the session's room", "attachment.not_found")
    url, file = content.get("url"), content.get("file")
    if isinstance(file, dict) and isinstance(file.get("url"), str):
        return str(file["url"]), file
    if isinstance(url, str):
        return url, None
    raise _refused(item, "the event carries no file", "attachment.not_found")


async def _fetched(
    matrix: MatrixAccessor, room_id: str | None, item: AttachmentDto, limits: AttachmentLimits
) -> AttachmentFile:
    if attachment_kind(item.mimetype, item.filename) is None:
        # Refused before any download: the type alone decides.
        raise _refused(
            item,
            f"{item.mimetype} is not a type this oracle reads: send text, PDF or "
            "PNG/JPEG/GIF/WebP images",
            "attachment.unsupported",
        )
    if item.mxc_uri is not None and not item.mxc_uri.startswith("mxc://"):
        raise _refused(
            item,
            "the oracle fetches only mxc:// media; upload the file with POST /attachments "
            "and send its mxcUri",
            "attachment.url_not_allowed",
        )
    try:
        if item.mxc_uri is not None:
            uri, encryption = item.mxc_uri, None
        else:
            uri, encryption = await _event_media(matrix, room_id, item)
        data = await matrix.download(uri, max_bytes=limits.max_file_bytes, encryption=encryption)
    except MatrixRequestError as exc:
        if exc.code == "matrix.too_large":
            raise _refused(item, "over the size limit", "attachment.too_large") from exc
        raise _refused(item, "could not be fetched", "attachment.not_found") from exc
    except NotConfiguredError as exc:
        raise _refused(
            item, "this oracle has no Matrix to fetch it from", "attachment.no_matrix"
        ) from exc
    except ServiceUnavailableError as exc:
        raise _refused(item, "Matrix is unreachable right now", "service.unavailable", 503) from exc
    return AttachmentFile(item.filename, item.mimetype, data, source=item.mxc_uri or item.event_id)


async def prepared_message(
    text: str,
    attachments: Sequence[AttachmentDto],
    *,
    matrix: MatrixAccessor,
    room_id: str | None,
    vision: Any | None,
    limits: AttachmentLimits,
) -> HumanMessage:
    """The turn's message with its files, or an :class:`HTTPError` naming the one refused.

    Args:
        text: The user's text.
        attachments: The message's ``attachments``.
        matrix: The user's Matrix accessor.
        room_id: The session's room (where ``eventId`` attachments are).
        vision: The ``vision`` model when the main model does not see images.
        limits: Sizes and the text budget.
    """
    files = [await _fetched(matrix, room_id, item, limits) for item in attachments]
    try:
        return await attachment_message(text, files, vision_model=vision, limits=limits)
    except AttachmentError as exc:
        status = 502 if exc.code == "attachment.vision_failed" else 422
        raise HTTPError(status, str(exc), code=exc.code) from exc
