"""Files attached to a user's message, turned into what the model reads.

:func:`attachment_message` makes the turn's ``HumanMessage``: the user's text first, then
each file as content the model takes:

- **images** (PNG, JPEG, GIF, WebP) as image content parts when the main model sees
  images; otherwise the ``vision`` role's model describes each one, and the description
  goes in as text;
- **text-like files** (``text/*``, JSON, XML, YAML, TOML, SQL, source files…) decoded as
  UTF-8, and **PDFs** as the text of their pages (``pypdf``), all within one character
  budget shared by the message's files, each cut at its share with a note saying so;
- anything else is refused with :class:`AttachmentError` (``attachment.unsupported``),
  naming the file: never dropped in silence.

The message's ``additional_kwargs["attachments"]`` keeps what was attached (name, type,
size, source), so a history shows the files without their extracted text.
"""

from __future__ import annotations

import base64
import io
import logging
import mimetypes
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.messages import HumanMessage

from oracle_core._errors import OracleError

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

__all__ = [
    "IMAGE_TYPES",
    "AttachmentError",
    "AttachmentFile",
    "AttachmentLimits",
    "attachment_kind",
    "attachment_message",
]

logger = logging.getLogger("oracle.attachments")

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/ld+json",
        "application/x-ndjson",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/sql",
        "application/javascript",
        "application/typescript",
        "application/x-sh",
        "application/x-python",
        "application/graphql",
        "image/svg+xml",
    }
)
# Files sent as application/octet-stream (or with no type) are judged by their name.
_TEXT_SUFFIXES = frozenset(
    {
        ".txt", ".md", ".markdown", ".rst", ".csv", ".tsv", ".json", ".jsonl", ".ndjson",
        ".yaml", ".yml", ".toml", ".ini", ".cfg", ".xml", ".html", ".htm", ".sql", ".py",
        ".js", ".ts", ".tsx", ".jsx", ".rs", ".go", ".java", ".kt", ".c", ".h", ".cpp",
        ".hpp", ".cs", ".rb", ".php", ".sh", ".swift", ".sol", ".log", ".tex",
    }
)  # fmt: skip
VISION_PROMPT = (
    "Describe this image for someone who cannot see it: what it shows, any text in it "
    "(verbatim), and details that could matter to a question about it. Be factual."
)

AttachmentKind = Literal["image", "text", "pdf"]


class AttachmentError(OracleError):
    """An attachment cannot reach the model; the message names the file.

    Codes: ``attachment.unsupported`` (a type the runtime does not read),
    ``attachment.too_large`` (over the limits), ``attachment.unreadable`` (the file is
    not what its type says: a PDF that does not parse, text with binary bytes),
    ``attachment.vision_failed`` (the ``vision`` model could not describe an image).
    """

    code = "attachment.unsupported"


@dataclass(frozen=True)
class AttachmentFile:
    """One attached file, fetched.

    Attributes:
        filename: Its name as the client gave it.
        mimetype: Its type as the client gave it.
        data: Its bytes.
        source: Where it came from (an ``mxc://`` URI or an event id), for the history.
    """

    filename: str
    mimetype: str
    data: bytes
    source: str | None = None


@dataclass(frozen=True)
class AttachmentLimits:
    """How much of a message's files reaches the model.

    Attributes:
        max_file_bytes: Bytes of one file.
        max_image_bytes: Bytes of one image (images are sent whole, base64).
        text_budget_chars: Characters of text from all the message's files together.
        max_pdf_pages: Pages read from one PDF.
    """

    max_file_bytes: int = 10 * 1024 * 1024
    max_image_bytes: int = 5 * 1024 * 1024
    text_budget_chars: int = 60_000
    max_pdf_pages: int = 200


def attachment_kind(mimetype: str, filename: str) -> AttachmentKind | None:
    """How the runtime reads a file of this type and name, or ``None`` when it cannot."""
    kind = mimetype.split(";", 1)[0].strip().lower()
    if kind in IMAGE_TYPES:
        return "image"
    if kind == "application/pdf":
        return "pdf"
    if kind.startswith("text/") or kind in _TEXT_TYPES or kind.endswith(("+json", "+xml")):
        return "text"
    if kind in {"", "application/octet-stream", "binary/octet-stream"}:
        guessed, _ = mimetypes.guess_type(filename)
        suffix = "." + filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
        if suffix in _TEXT_SUFFIXES:
            return "text"
        if guessed is not None and guessed != kind:
            return attachment_kind(guessed, "")
    return None


def check_attachment(file: AttachmentFile, limits: AttachmentLimits) -> AttachmentKind:
    """The file's kind once it may reach the model.

    Raises:
        AttachmentError: an unsupported type or a file over the limits.
    """
    kind = attachment_kind(file.mimetype, file.filename)
    if kind is None:
        raise AttachmentError(
            f"{file.filename!r} ({file.mimetype}) is not a type this oracle reads: send "
            "text, PDF or PNG/JPEG/GIF/WebP images",
            code="attachment.unsupported",
        )
    cap = limits.max_image_bytes if kind == "image" else limits.max_file_bytes
    if len(file.data) > cap:
        raise AttachmentError(
            f"{file.filename!r} is {len(file.data)} bytes; the limit is {cap}",
            code="attachment.too_large",
        )
    return kind


def _decoded(file: AttachmentFile) -> str:
    if b"\x00" in file.data[:8192]:
        raise AttachmentError(
            f"{file.filename!r} is not text (it holds binary data)", code="attachment.unreadable"
        )
    return file.data.decode("utf-8-sig", errors="replace")


def _pdf_text(file: AttachmentFile, limits: AttachmentLimits, budget: int) -> str:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(file.data))
        if reader.is_encrypted:
            raise AttachmentError(
                f"{file.filename!r} is an encrypted PDF", code="attachment.unreadable"
            )
        pages, total = [], 0
        for number, page in enumerate(reader.pages[: limits.max_pdf_pages], start=1):
            text = (page.extract_text() or "").strip()
            pages.append(f"[page {number}]\n{text}")
            total += len(text)
            if total > budget:  # the rest would be cut anyway
                break
    except (PdfReadError, ValueError, KeyError, TypeError) as exc:
        raise AttachmentError(
            f"{file.filename!r} does not read as a PDF", code="attachment.unreadable"
        ) from exc
    return "\n\n".join(pages)


def _cut(text: str, share: int) -> str:
    if len(text) <= share:
        return text
    return f"{text[:share]}\n[cut: {share} of {len(text)} characters shown]"


def _wrapped(file: AttachmentFile, body: str, what: str = "content") -> dict[str, Any]:
    header = f'<attachment name="{file.filename}" type="{file.mimetype}" {what}>'
    return {"type": "text", "text": f"{header}\n{body}\n</attachment>"}


async def _described(file: AttachmentFile, model: BaseChatModel) -> str:
    url = f"data:{file.mimetype};base64,{base64.b64encode(file.data).decode()}"
    answer = await model.ainvoke(
        [
            HumanMessage(
                content=[
                    {"type": "text", "text": VISION_PROMPT},
                    {"type": "image_url", "image_url": {"url": url}},
                ]
            )
        ]
    )
    return str(answer.text).strip()


async def attachment_message(
    text: str,
    files: Sequence[AttachmentFile],
    *,
    vision_model: BaseChatModel | None = None,
    limits: AttachmentLimits | None = None,
) -> HumanMessage:
    """The turn's message with its files as content the model takes.

    Args:
        text: The user's text.
        files: The fetched attachments, in the client's order.
        vision_model: Describes images when given (the main model does not see images);
            ``None`` sends images to the main model as image parts.
        limits: File sizes and the text budget.

    Raises:
        AttachmentError: a file that cannot reach the model (checked for every file
            before any work: nothing is half-done).
    """
    limits = limits or AttachmentLimits()
    kinds = [check_attachment(file, limits) for file in files]
    texts: dict[int, str] = {}
    for index, (file, kind) in enumerate(zip(files, kinds, strict=True)):
        if kind == "text":
            texts[index] = _decoded(file)
        elif kind == "pdf":
            texts[index] = _pdf_text(file, limits, limits.text_budget_chars)
    share = limits.text_budget_chars // max(1, len(texts))
    content: list[str | dict[str, Any]] = [{"type": "text", "text": text}]
    for index, (file, kind) in enumerate(zip(files, kinds, strict=True)):
        if kind != "image":
            content.append(_wrapped(file, _cut(texts[index], share)))
        elif vision_model is None:
            content.append(_wrapped(file, "(the image follows)", "image"))
            url = f"data:{file.mimetype};base64,{base64.b64encode(file.data).decode()}"
            content.append({"type": "image_url", "image_url": {"url": url}})
        else:
            try:
                described = await _described(file, vision_model)
            except Exception as exc:
                raise AttachmentError(
                    f"{file.filename!r} could not be described ({type(exc).__name__})",
                    code="attachment.vision_failed",
                ) from exc
            content.append(_wrapped(file, described, "description"))
    return HumanMessage(content=content, additional_kwargs={"attachments": _listed(files)})


def _listed(files: Sequence[AttachmentFile]) -> list[Mapping[str, Any]]:
    return [
        {
            "filename": f.filename,
            "mimetype": f.mimetype,
            "size": len(f.data),
            **({"source": f.source} if f.source else {}),
        }
        for f in files
    ]
