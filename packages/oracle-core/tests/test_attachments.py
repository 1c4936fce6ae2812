"""Attached files become what the model reads: text and PDFs as text within a budget,
images as image parts or as the vision model's description; anything else is refused by
name, before any work is done."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from oracle_core import AttachmentError, AttachmentFile, AttachmentLimits, attachment_message
from oracle_core.testing import ScriptedChatModel, tiny_pdf, tiny_png


def blocks(message: HumanMessage) -> list[str | dict[str, Any]]:
    assert isinstance(message.content, list)
    return list(message.content)


def text_of(block: object) -> str:
    assert isinstance(block, dict)
    return str(block["text"])


async def test_text_and_pdf_files_follow_the_users_text() -> None:
    message = await attachment_message(
        "Summarise these",
        [
            AttachmentFile("notes.md", "text/markdown", b"# Notes\nBuy milk"),
            AttachmentFile("report.pdf", "application/pdf", tiny_pdf(["Revenue grew 12 percent"])),
            AttachmentFile("data.json", "application/octet-stream", b'{"a": 1}'),
        ],
    )
    user, notes, report, data = blocks(message)
    assert text_of(user) == "Summarise these"
    assert text_of(notes).startswith('<attachment name="notes.md" type="text/markdown" content>')
    assert "Buy milk" in text_of(notes)
    assert "[page 1]" in text_of(report)
    assert "Revenue grew 12 percent" in text_of(report)
    assert '{"a": 1}' in text_of(data)  # judged by its name when sent as octet-stream
    assert message.additional_kwargs["attachments"] == [
        {"filename": "notes.md", "mimetype": "text/markdown", "size": 16},
        {
            "filename": "report.pdf",
            "mimetype": "application/pdf",
            "size": len(tiny_pdf(["Revenue grew 12 percent"])),
        },
        {"filename": "data.json", "mimetype": "application/octet-stream", "size": 8},
    ]


async def test_the_text_budget_is_shared_and_a_cut_says_so() -> None:
    limits = AttachmentLimits(text_budget_chars=100)
    message = await attachment_message(
        "read",
        [
            AttachmentFile("a.txt", "text/plain", b"a" * 500),
            AttachmentFile("b.txt", "text/plain", b"b" * 10),
        ],
        limits=limits,
    )
    a, b = (text_of(block) for block in message.content[1:])
    assert "a" * 50 in a
    assert "a" * 51 not in a
    assert "[cut: 50 of 500 characters shown]" in a
    assert "b" * 10 in b
    assert "[cut" not in b


async def test_images_go_to_a_main_model_that_sees_them() -> None:
    png = tiny_png()
    message = await attachment_message(
        "what is this", [AttachmentFile("dot.png", "image/png", png)]
    )
    _, label, image = blocks(message)
    assert 'name="dot.png"' in text_of(label)
    assert isinstance(image, dict)
    assert image["type"] == "image_url"
    assert image["image_url"]["url"].startswith("data:image/png;base64,iVBORw0KGgo")


async def test_otherwise_the_vision_model_describes_each_image() -> None:
    vision = ScriptedChatModel([AIMessage("A red square.")])
    message = await attachment_message(
        "what is this", [AttachmentFile("dot.png", "image/png", tiny_png())], vision_model=vision
    )
    _, described = blocks(message)
    assert "A red square." in text_of(described)
    assert 'type="image/png" description>' in text_of(described)
    [call] = vision.calls
    [asked] = call.messages
    assert any(part.get("type") == "image_url" for part in asked.content if isinstance(part, dict))


@pytest.mark.parametrize(
    ("file", "code"),
    [
        (
            AttachmentFile("deck.pptx", "application/vnd.ms-powerpoint", b"PK\x03\x04"),
            "attachment.unsupported",
        ),
        (AttachmentFile("blob", "application/octet-stream", b"\x00\x01"), "attachment.unsupported"),
        (AttachmentFile("big.txt", "text/plain", b"x" * 21), "attachment.too_large"),
        (AttachmentFile("fake.txt", "text/plain", b"ab\x00cd"), "attachment.unreadable"),
        (
            AttachmentFile("fake.pdf", "application/pdf", b"not a pdf at all"),
            "attachment.unreadable",
        ),
    ],
)
async def test_what_cannot_reach_the_model_is_refused_by_name(
    file: AttachmentFile, code: str
) -> None:
    vision = ScriptedChatModel([])
    with pytest.raises(AttachmentError) as refused:
        await attachment_message(
            "x",
            [AttachmentFile("ok.png", "image/png", tiny_png()), file],
            vision_model=vision,
            limits=AttachmentLimits(max_file_bytes=20),
        )
    assert refused.value.code == code
    assert repr(file.filename) in str(refused.value)
    assert vision.calls == []  # checked before any work
