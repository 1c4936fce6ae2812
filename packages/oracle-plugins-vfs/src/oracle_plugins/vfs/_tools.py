"""The ten ``vfs_*`` tools (03-plugins §17.3), written against :class:`VfsBackend`.

Each tool checks its paths (``check_path``) before it asks the backend for anything, and
answers the model in text. A failure is a :class:`VfsError`, turned here into words by
its kind (§17.5), so both backends fail alike: access problems are never described as a
missing file, and the store is never described as end-to-end encrypted.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from oracle_core import Effect, PluginTool, RuntimeContext
from oracle_plugins.vfs._backend import VfsBackend, VfsError
from oracle_plugins.vfs._config import MAX_READ_LINES_CAP
from oracle_plugins.vfs._paths import check_path

__all__ = ["GRANT_STEPS", "TOOL_NAMES", "build_tools", "error_text", "mime_type_for"]

TOOL_NAMES = (
    "vfs_search",
    "vfs_grep",
    "vfs_glob",
    "vfs_list",
    "vfs_read",
    "vfs_write",
    "vfs_edit",
    "vfs_move",
    "vfs_delete",
    "vfs_share",
)

GRANT_STEPS = "Portal → the domain → Library → Files → Access → Manage access"
"""Where a user grants an oracle their files."""

BackendFor = Callable[[RuntimeContext[Any]], VfsBackend | None]

_EXTRA_TYPES = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".csv": "text/csv",
    ".json": "application/json",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".txt": "text/plain",
}
_SEARCH_HITS = 20
_GREP_MATCHES = 100
_GLOB_FILES = 200


def mime_type_for(path: str) -> str:
    """The MIME type of ``path`` by its extension (``text/plain`` when unknown)."""
    dot = path.rfind(".")
    extension = path[dot:].lower() if dot > path.rfind("/") else ""
    return _EXTRA_TYPES.get(extension) or mimetypes.guess_type(path)[0] or "text/plain"


_MESSAGES: dict[str, str] = {
    "denied": (
        "Access denied for {where}: it is outside what the user granted this oracle, or the "
        "grant is read-only for this action. The user can change it in {steps}."
    ),
    "not_found": (
        "{where} was not found: it does not exist, or it is outside the folders the user "
        "granted. Check with vfs_list or vfs_glob."
    ),
    "exists": (
        "{where} already exists. Ask the user before overwriting it; if they agree, call "
        "vfs_write again with overwrite=true."
    ),
    "not_unique": (
        "oldString occurs more than once in {where}: add surrounding text so it is unique, "
        "or set replaceAll=true."
    ),
    "no_match": "oldString does not occur in {where}: read the file and copy the exact text.",
    "occupied": "The destination {where} is taken: choose another path, or ask the user.",
    "version_limit": "{where} has reached the file store's limit of 50 versions; it cannot change.",
    "conflict": "{where} was changed by someone else at the same time; read it and retry.",
    "too_large": "Too large{detail}: narrow the scope (a smaller folder or line window).",
    "unsupported": "The file store cannot do this{detail}. Narrow the scope or pick another file.",
    "busy": "The file store is busy right now; wait a moment and try again.",
    "unavailable": "The file store is unavailable right now; try again later.",
}


def error_text(error: VfsError, *, oracle_did: str | None, path: str = "") -> str:
    """What the model reads for ``error`` (03-plugins §17.5).

    Args:
        error: The failure.
        oracle_did: ``ORACLE_DID``, shown in the grant instructions.
        path: The path the failure is about, when there is one.
    """
    if error.kind == "invalid_path":
        return f"Invalid path: {error.detail or path}. Use absolute paths like /notes/todo.md."
    if error.kind == "no_delegation":
        return (
            "The user has not granted this oracle access to their files, or the grant expired. "
            f"To grant it: {GRANT_STEPS}, and paste this oracle's DID: "
            f"{oracle_did or '(unknown: ORACLE_DID is not set)'}"
        )
    template = _MESSAGES.get(error.kind, _MESSAGES["unavailable"])
    return template.format(
        where=path or "the path",
        steps=GRANT_STEPS,
        detail=f" ({error.detail})" if error.detail else "",
    )


# --- inputs ---------------------------------------------------------------------------------

_PATH = "Absolute path, e.g. /notes/todo.md."


class _Args(BaseModel):
    # Unknown keys are refused: a misspelt field must not be silently dropped.
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class SearchArgs(_Args):
    """Arguments of ``vfs_search``."""

    q: str = Field(min_length=1, max_length=512, description="What to look for.")
    path: str = Field("/", description="Folder to search under.")


class GrepArgs(_Args):
    """Arguments of ``vfs_grep``."""

    q: str = Field(min_length=1, max_length=512, description="Exact text to find.")
    path: str = Field("/", description="Folder to search under.")


class GlobArgs(_Args):
    """Arguments of ``vfs_glob``."""

    pattern: str = Field(min_length=1, max_length=512, description="e.g. /notes/*.md or **/*.pdf.")


class ListArgs(_Args):
    """Arguments of ``vfs_list``."""

    path: str = Field("/", description="Folder to list.")


class ReadArgs(_Args):
    """Arguments of ``vfs_read``."""

    path: str = Field(description=_PATH)
    offset: int | None = Field(None, ge=1, description="First line (1-based).")
    limit: int | None = Field(None, ge=1, description="Lines to read.")


class WriteArgs(_Args):
    """Arguments of ``vfs_write``."""

    path: str = Field(description=_PATH)
    content: str = Field(description="The file's text.")
    mimeType: str | None = Field(None, description="Default: from the extension.")
    overwrite: bool = Field(False, description="Replace an existing file (ask the user first).")


class EditArgs(_Args):
    """Arguments of ``vfs_edit``."""

    path: str = Field(description=_PATH)
    oldString: str = Field(min_length=1, description="Exact text to replace.")
    newString: str = Field(description="Replacement text.")
    replaceAll: bool = Field(False, description="Replace every occurrence.")


# ``from`` is a Python keyword, so the model is built rather than declared, and the tool
# hands the model its JSON schema: LangChain builds tool schemas from the model's
# ``__init__`` signature, which cannot hold ``from`` (an alias would show as ``from_``).
MoveArgs: type[_Args] = create_model(  # type: ignore[call-overload]
    "MoveArgs",
    __base__=_Args,
    __doc__="Arguments of ``vfs_move`` (``from``, ``to``).",
    **{
        "from": (str, Field(description="Current path.")),
        "to": (str, Field(description="New path.")),
    },
)


class DeleteArgs(_Args):
    """Arguments of ``vfs_delete``."""

    paths: list[str] = Field(min_length=1, max_length=1000, description="Paths to trash.")


class ShareArgs(_Args):
    """Arguments of ``vfs_share``."""

    path: str = Field(description=_PATH)
    public: bool = Field(True, description="false unpublishes.")


# --- rendering ------------------------------------------------------------------------------


def _numbered(text: str, first: int) -> str:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return "\n".join(f"{first + i:>6}\t{line}" for i, line in enumerate(lines))


def _ranges(lines: tuple[tuple[int, int], ...]) -> str:
    return ", ".join(f"L{a}" if a == b else f"L{a}-{b}" for a, b in lines)


def _capped(items: list[str], cap: int, what: str) -> str:
    shown = "\n".join(items[:cap])
    more = len(items) - cap
    return shown + (f"\n… {more} more; narrow the {what}." if more > 0 else "")


# --- what each tool does ------------------------------------------------------------------


async def _search(backend: VfsBackend, args: SearchArgs) -> str:
    found = await backend.search(args.q, check_path(args.path, root_ok=True))
    if not found.hits:
        return f"No files match {args.q!r} under {args.path}."
    lines = []
    for hit in found.hits[:_SEARCH_HITS]:
        where = f" ({_ranges(hit.lines)})" if hit.lines else ""
        snippet = hit.snippet.strip()[:200]
        lines.append(f"- {hit.path}{where}" + (f": {snippet}" if snippet else ""))
    if not found.semantic:
        lines.append("(Only word matches: semantic search did not answer.)")
    return "\n".join(lines)


async def _grep(backend: VfsBackend, args: GrepArgs) -> str:
    matches = await backend.grep(args.q, check_path(args.path, root_ok=True))
    if not matches:
        return f"No line holds {args.q!r} under {args.path}."
    return _capped([f"{m.path}:{m.line}: {m.text[:300]}" for m in matches], _GREP_MATCHES, "path")


async def _glob(backend: VfsBackend, args: GlobArgs) -> str:
    if "\x00" in args.pattern:
        raise VfsError("invalid_path", "patterns must not hold NUL characters")
    files = await backend.glob(args.pattern)
    if not files:
        return f"No files match {args.pattern}."
    return _capped(files, _GLOB_FILES, "pattern")


async def _list(backend: VfsBackend, args: ListArgs) -> str:
    nodes = await backend.list(check_path(args.path, root_ok=True))
    if not nodes:
        return f"{args.path} is empty."
    return "\n".join(n.path + ("/" if n.kind == "folder" else "") for n in nodes)


async def _read(backend: VfsBackend, args: ReadArgs, read_cap: int) -> str:
    path = check_path(args.path)
    offset = args.offset or 1
    window = await backend.read(path, offset, min(args.limit or read_cap, read_cap))
    if window.count == 0:
        return f"{path} has {window.total_lines} lines; nothing at line {offset}."
    last = window.offset + window.count - 1
    head = f"{path} (lines {window.offset}-{last} of {window.total_lines}):"
    tail = ""
    if window.has_more:
        left = max(window.total_lines - last, 0)
        tail = f"\n[{left} more lines: call vfs_read with offset={last + 1}]"
    return f"{head}\n{_numbered(window.text, window.offset)}{tail}"


async def _write(backend: VfsBackend, args: WriteArgs) -> str:
    path = check_path(args.path)
    mime = args.mimeType or mime_type_for(path)
    info = await backend.write(path, args.content.encode(), mime, overwrite=args.overwrite)
    version = f", version {info.version}" if info.version is not None else ""
    return f"Wrote {info.path} ({info.size} bytes, {info.mime_type}{version})."


async def _edit(backend: VfsBackend, args: EditArgs) -> str:
    path = check_path(args.path)
    count = await backend.edit(path, args.oldString, args.newString, replace_all=args.replaceAll)
    return f"Edited {path}: {count} replacement{'s' if count != 1 else ''}."


async def _move(backend: VfsBackend, args: Any) -> str:
    source, destination = check_path(getattr(args, "from")), check_path(args.to)
    moved = await backend.move(source, destination)
    return f"Moved {source} to {moved.path}."


async def _delete(backend: VfsBackend, args: DeleteArgs) -> str:
    results = await backend.delete([check_path(p) for p in args.paths])
    trashed = [r.path for r in results if r.status == "trashed"]
    missing = [r.path for r in results if r.status == "missing"]
    failed = [f"{r.path} ({r.error or 'failed'})" for r in results if r.status == "failed"]
    parts = []
    if trashed:
        parts.append(f"Moved to the trash ({len(trashed)}): {', '.join(trashed)}.")
    if missing:
        parts.append(f"Not found, skipped ({len(missing)}): {', '.join(missing)}.")
    if failed:
        parts.append(f"Skipped, not deleted ({len(failed)}): {'; '.join(failed)}.")
    return " ".join(parts) or "Nothing to delete."


async def _share(backend: VfsBackend, args: ShareArgs) -> str:
    path = check_path(args.path)
    url = await backend.share(path, public=args.public)
    if not args.public:
        return f"{path} is no longer public."
    if url is None:
        return f"{path} is public, but the file store gave no link."
    return f"{path} is public: {url} (anyone with the link can open it)."


def _where(args: BaseModel, error: VfsError) -> str:
    """The path a failure is about: a move's destination when it is taken."""
    if isinstance(args, MoveArgs):
        return str(getattr(args, "to" if error.kind == "occupied" else "from"))
    return str(getattr(args, "path", ""))


# --- tools ----------------------------------------------------------------------------------


def build_tools(backend_for: BackendFor, *, max_read_lines: int) -> list[PluginTool]:
    """The ten tools over the backend ``backend_for(rt_ctx)`` gives each call.

    Args:
        backend_for: The request's backend; ``None`` answers "unavailable".
        max_read_lines: ``VFS_MAX_READ_LINES`` (at most 5,000 lines a call either way).
    """
    read_cap = min(max_read_lines, MAX_READ_LINES_CAP)

    async def read(backend: VfsBackend, args: ReadArgs) -> str:
        return await _read(backend, args, read_cap)

    def tool(
        name: str,
        description: str,
        schema: type[BaseModel],
        effect: Effect,
        action: Callable[[VfsBackend, Any], Awaitable[str]],
        *,
        as_json_schema: bool = False,
    ) -> PluginTool:
        async def handler(args: Any, rt_ctx: RuntimeContext[Any]) -> str:
            if not isinstance(args, BaseModel):
                # Handed over as JSON (see MoveArgs): validated here instead.
                try:
                    args = schema.model_validate(args)
                except ValidationError as exc:
                    problems = "; ".join(
                        f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}"
                        for e in exc.errors()
                    )
                    return f"Invalid arguments for {name}: {problems}"
            try:
                backend = backend_for(rt_ctx)
                if backend is None:
                    raise VfsError("unavailable", "no file store for this request")
                return await action(backend, args)
            except VfsError as exc:
                did = rt_ctx.config.get("ORACLE_DID")
                return error_text(exc, oracle_did=str(did) if did else None, path=_where(args, exc))

        return PluginTool(
            name=name,
            description=description,
            args_schema=schema.model_json_schema() if as_json_schema else schema,
            handler=handler,
            effect=effect,
        )

    return [
        tool(
            "vfs_search",
            "Search the user's files by meaning and words; paths with line ranges.",
            SearchArgs,
            "read",
            _search,
        ),
        tool(
            "vfs_grep",
            "Find lines holding exact text in the user's files.",
            GrepArgs,
            "read",
            _grep,
        ),
        tool(
            "vfs_glob",
            "List the user's files matching a pattern (* in a name, ** across folders).",
            GlobArgs,
            "read",
            _glob,
        ),
        tool(
            "vfs_list",
            "List a folder of the user's files; folders end with /.",
            ListArgs,
            "read",
            _list,
        ),
        tool(
            "vfs_read",
            f"Read a file of the user's as numbered lines (at most {read_cap} a call).",
            ReadArgs,
            "read",
            read,
        ),
        tool(
            "vfs_write",
            "Create a file in the user's files (overwrite=true only after asking).",
            WriteArgs,
            "write",
            _write,
        ),
        tool("vfs_edit", "Replace exact text in a file of the user's.", EditArgs, "write", _edit),
        tool(
            "vfs_move",
            "Move or rename a file or folder of the user's.",
            MoveArgs,
            "write",
            _move,
            as_json_schema=True,
        ),
        tool(
            "vfs_delete",
            "Move files or folders of the user's to the trash (recoverable).",
            DeleteArgs,
            "destructive",
            _delete,
        ),
        tool(
            "vfs_share",
            "Publish a file or folder of the user's (a public link) or unpublish it.",
            ShareArgs,
            "write",
            _share,
        ),
    ]
