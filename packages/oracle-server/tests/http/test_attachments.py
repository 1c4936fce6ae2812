"""Attachments reach the model: uploaded with ``POST /attachments`` (or already on the
user's homeserver), fetched through the Matrix service, converted (text, PDF, images for
the main model or described by the vision model); everything else is a 422 that names
the file, before any turn runs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from oracle_core.testing import tiny_pdf, tiny_png
from oracle_server import create_oracle_app
from oracle_server.testing import OpenAIDouble, auth_headers, serving
from oracle_ucan import Ed25519Signer


@asynccontextmanager
async def oracle(
    tmp_path: Path, llm: OpenAIDouble, **env: str
) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    app = await create_oracle_app(
        {"name": "Files Oracle"},
        env={
            "ORACLE_BACKEND": "local",
            "SQLITE_DATABASE_PATH": str(tmp_path),
            **llm.env(),
            **env,
        },
        discover_entry_points=False,
        skip_graceful_shutdown=True,
    )
    headers = auth_headers(Ed25519Signer.generate(), app.state.oracle_did)
    async with (
        serving(app) as base_url,
        httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as http,
    ):
        yield http, app


async def upload(http: httpx.AsyncClient, name: str, mimetype: str, data: bytes) -> Any:
    answer = await http.post(
        "/attachments", params={"filename": name}, content=data, headers={"content-type": mimetype}
    )
    assert answer.status_code == 201, answer.text
    return answer.json()


def user_content(request: Any) -> list[Any]:
    content = request.messages[-1]["content"]
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


async def test_an_uploaded_pdf_and_text_file_reach_the_model(tmp_path: Path) -> None:
    async with OpenAIDouble(["Read them."]) as llm, oracle(tmp_path, llm) as (http, _app):
        pdf = await upload(http, "q3.pdf", "application/pdf", tiny_pdf(["Revenue grew 12 percent"]))
        assert pdf["mxcUri"].startswith("mxc://")
        assert pdf["mimetype"] == "application/pdf"
        notes = await upload(http, "notes.md", "text/markdown", b"# Notes\nShip on Friday")
        session = (await http.post("/sessions")).json()["sessionId"]
        body = {
            "message": "What do these say?",
            "attachments": [
                {"mxcUri": pdf["mxcUri"], "filename": "q3.pdf", "mimetype": "application/pdf"},
                {"mxcUri": notes["mxcUri"], "filename": "notes.md", "mimetype": "text/markdown"},
            ],
        }
        answer = await http.post(f"/messages/{session}", json=body)
        assert answer.status_code == 200, answer.text
        parts = user_content(llm.requests[-1])
        texts = [p["text"] for p in parts if p["type"] == "text"]
        assert texts[0] == "What do these say?"
        assert "Revenue grew 12 percent" in texts[1]
        assert "Ship on Friday" in texts[2]

        # The history shows what the user typed and which files, not their text.
        [human, _ai] = (await http.get(f"/messages/{session}")).json()["messages"]
        assert human["content"] == "What do these say?"
        assert [a["filename"] for a in human["attachments"]] == ["q3.pdf", "notes.md"]
        assert "Revenue" not in json.dumps(human)


async def test_an_image_is_described_by_the_vision_model_unless_the_main_one_sees(
    tmp_path: Path,
) -> None:
    png = tiny_png()
    async with (
        OpenAIDouble(["A small red square.", "It is red."]) as llm,
        oracle(tmp_path / "a", llm) as (http, _app),
    ):
        image = await upload(http, "dot.png", "image/png", png)
        session = (await http.post("/sessions")).json()["sessionId"]
        attachment = {"mxcUri": image["mxcUri"], "filename": "dot.png", "mimetype": "image/png"}
        body = {"message": "What colour?", "attachments": [attachment]}
        assert (await http.post(f"/messages/{session}", json=body)).status_code == 200
        vision, main = llm.requests[-2:]
        assert any(p["type"] == "image_url" for p in user_content(vision))
        main_parts = user_content(main)
        assert all(p["type"] == "text" for p in main_parts)
        assert "A small red square." in main_parts[1]["text"]

    async with (
        OpenAIDouble(["It is red."]) as llm,
        oracle(tmp_path / "b", llm, MAIN_MODEL_VISION="true") as (http, _app),
    ):
        image = await upload(http, "dot.png", "image/png", png)
        session = (await http.post("/sessions")).json()["sessionId"]
        attachment = {"mxcUri": image["mxcUri"], "filename": "dot.png", "mimetype": "image/png"}
        body = {"message": "What colour?", "attachments": [attachment]}
        assert (await http.post(f"/messages/{session}", json=body)).status_code == 200
        [main] = llm.requests
        [url] = [p["image_url"]["url"] for p in user_content(main) if p["type"] == "image_url"]
        assert url.startswith("data:image/png;base64,")


async def test_what_cannot_be_read_is_a_422_naming_it_and_runs_nothing(tmp_path: Path) -> None:
    async with OpenAIDouble([]) as llm, oracle(tmp_path, llm) as (http, _app):
        text = await upload(http, "a.txt", "text/plain", b"hello")
        session = (await http.post("/sessions")).json()["sessionId"]
        cases = [
            ({"mxcUri": text["mxcUri"], "filename": "deck.pptx",
              "mimetype": "application/vnd.ms-powerpoint"}, "attachment.unsupported"),
            ({"mxcUri": "https://internal.example/secret", "filename": "a.txt",
              "mimetype": "text/plain"}, "attachment.url_not_allowed"),
            ({"mxcUri": "mxc://localhost/nothing-here", "filename": "a.txt",
              "mimetype": "text/plain"}, "attachment.not_found"),
            ({"eventId": "$nope", "filename": "a.txt", "mimetype": "text/plain"},
             "attachment.not_found"),
            ({"mxcUri": text["mxcUri"], "filename": "a.pdf", "mimetype": "application/pdf"},
             "attachment.unreadable"),
        ]  # fmt: skip
        for attachment, code in cases:
            body = {"message": "read", "attachments": [attachment]}
            answer = await http.post(f"/messages/{session}", json=body)
            assert answer.status_code == 422, answer.text
            assert answer.json()["code"] == code
            assert repr(attachment["filename"]) in answer.json()["message"]
        assert llm.requests == []
        assert (await http.get(f"/messages/{session}")).json()["messages"] == []


async def test_uploads_are_checked_and_counted_against_a_daily_quota(tmp_path: Path) -> None:
    async with (
        OpenAIDouble([]) as llm,
        oracle(tmp_path, llm, ATTACHMENT_UPLOAD_MB_PER_DAY="1") as (http, _app),
    ):
        refused = await http.post(
            "/attachments",
            params={"filename": "tool.exe"},
            content=b"MZ",
            headers={"content-type": "application/x-msdownload"},
        )
        assert refused.status_code == 422
        assert refused.json()["code"] == "attachment.unsupported"
        nameless = await http.post(
            "/attachments", content=b"x", headers={"content-type": "text/plain"}
        )
        assert nameless.status_code == 400
        assert nameless.json()["code"] == "attachment.bad_name"

        await upload(http, "a.txt", "text/plain", b"a" * 600_000)
        over = await http.post(
            "/attachments",
            params={"filename": "b.txt"},
            content=b"b" * 600_000,
            headers={"content-type": "text/plain"},
        )
        assert over.status_code == 429
        assert over.json()["code"] == "attachment.quota_exceeded"
        assert int(over.headers["retry-after"]) >= 1
