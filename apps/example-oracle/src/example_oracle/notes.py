"""An always-visible plugin: short notes per user, kept in a SQLite file."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from oracle_core import OraclePlugin, PluginContext, PluginTool, RuntimeContext, plugin_tool


class NotesConfig(BaseModel):
    """Environment of the notes plugin."""

    NOTES_DATABASE_PATH: str = "./data/notes.sqlite"


class SaveNoteArgs(BaseModel):
    """Arguments of ``save_note``."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=2000, description="The note, as the user said it.")


class ListNotesArgs(BaseModel):
    """Arguments of ``list_notes``."""

    model_config = ConfigDict(extra="forbid")

    limit: int = Field(10, ge=1, le=50, description="How many of the newest notes to return.")


class NotesPlugin(OraclePlugin):
    """Saves and lists the user's notes."""

    name = "notes"
    version = "0.1.0"
    config_schema = NotesConfig
    manifest = {
        "title": "Notes",
        "summary": "Save short notes for the user and read them back.",
        "when_to_use": [
            "The user asks you to remember or note something",
            "The user asks for their notes",
        ],
        "examples": [
            {
                "user": "Note that the boiler was serviced",
                "tool": "save_note",
                "args": {"text": "The boiler was serviced"},
            }
        ],
        "tags": ["notes", "memory"],
        "category": "data",
        "visibility": "always",
        "stability": "stable",
    }

    def __init__(self) -> None:
        self._db: sqlite3.Connection | None = None

    @asynccontextmanager
    async def lifespan(self, ctx: PluginContext[NotesConfig]) -> AsyncIterator[None]:
        path = Path(ctx.plugin_config.NOTES_DATABASE_PATH)
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, check_same_thread=False)
        db.execute(
            "CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, user_did TEXT NOT NULL,"
            " text TEXT NOT NULL, created_at TEXT DEFAULT CURRENT_TIMESTAMP)"
        )
        self._db = db
        try:
            yield
        finally:
            self._db = None
            db.close()

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("notes database is not open")
        return self._db

    def get_tools(self, ctx: PluginContext[NotesConfig]) -> list[PluginTool]:
        @plugin_tool(
            name="save_note",
            description="Save a note for the user.",
            args_schema=SaveNoteArgs,
            effect="write",
        )
        async def save_note(args: SaveNoteArgs, rt_ctx: RuntimeContext[Any]) -> str:
            db = self._conn()

            def insert() -> None:
                with db:
                    db.execute(
                        "INSERT INTO notes (user_did, text) VALUES (?, ?)",
                        (rt_ctx.user.did, args.text),
                    )

            await asyncio.to_thread(insert)
            return "Saved."

        @plugin_tool(
            name="list_notes",
            description="List the user's newest notes.",
            args_schema=ListNotesArgs,
            effect="read",
        )
        async def list_notes(args: ListNotesArgs, rt_ctx: RuntimeContext[Any]) -> list[str]:
            db = self._conn()
            rows = await asyncio.to_thread(
                lambda: db.execute(
                    "SELECT text FROM notes WHERE user_did = ? ORDER BY id DESC LIMIT ?",
                    (rt_ctx.user.did, args.limit),
                ).fetchall()
            )
            return [row[0] for row in rows]

        return [save_note, list_notes]
