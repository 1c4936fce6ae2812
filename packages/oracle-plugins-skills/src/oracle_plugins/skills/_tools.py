"""The two registry tools: ``list_skills`` and ``search_skills``."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import ToolMessage
from pydantic import BaseModel, ConfigDict, Field, field_validator

from oracle_core import PluginTool, RuntimeContext, plugin_tool
from oracle_plugins.skills._auth import skills_invocation
from oracle_plugins.skills._client import SkillsRegistryClient, SkillsRegistryError
from oracle_plugins.skills._skills import dedupe_by_name, private_first, skill_entry

__all__ = ["ListSkillsArgs", "SearchSkillsArgs", "build_tools"]

_UNEXPECTED = "the skills registry lookup failed unexpectedly; try again later"

_ENTRY_FIELDS = (
    "Each skill has `title` (its name), `description`, `path` (its read-only folder in "
    "the sandbox, /workspace/skills/<name>), `source` (`private`: published by this user; "
    "`public`: the open registry) and `cid`, which `load_skill` and `sandbox_run` take to "
    "use the skill; `createdAt` when known. A `cid` is an identifier, never a file path."
)

LIST_DESCRIPTION = (
    "List skills in the IXO skills registry, a page at a time: the user's own published "
    "(private) skills first, then public ones. Optional `limit` (1-100, default 20) and "
    "`offset` (default 0); `pagination.hasMore` says whether another page exists. " + _ENTRY_FIELDS
)

SEARCH_DESCRIPTION = (
    'Search the IXO skills registry by keywords in `q` (e.g. "invoice", "pptx"): the '
    "user's own published (private) skills first, then public ones, one entry per skill "
    "name (the user's own version wins, else the newest). Optional `limit` (1-50, "
    "default 10). " + _ENTRY_FIELDS
)


class ListSkillsArgs(BaseModel):
    """Arguments of ``list_skills``."""

    model_config = ConfigDict(extra="forbid")

    limit: int = Field(20, ge=1, le=100, description="How many skills, 1-100 (default 20).")
    offset: int = Field(0, ge=0, description="How many to skip, for the next page (default 0).")


class SearchSkillsArgs(BaseModel):
    """Arguments of ``search_skills``."""

    model_config = ConfigDict(extra="forbid")

    q: str = Field(
        min_length=1,
        max_length=500,
        description='What to look for, e.g. "invoice", "presentation", "docx". Required.',
    )
    limit: int = Field(10, ge=1, le=50, description="Most results, 1-50 (default 10).")

    @field_validator("q")
    @classmethod
    def _q_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("q must not be blank: give keywords of the skill to find")
        return value.strip()


def _tool_error(rt_ctx: RuntimeContext[Any], tool: str, message: str) -> ToolMessage | str:
    """An error result the model reads as a failed call (``status="error"``)."""
    if rt_ctx.tool_call_id is None:
        return f"Error: {message}"
    return ToolMessage(
        content=f"Error: {message}", tool_call_id=rt_ctx.tool_call_id, name=tool, status="error"
    )


def build_tools(client: SkillsRegistryClient) -> list[PluginTool]:
    """The registry tools over ``client``.

    Each call mints a fresh ``ixo:skills`` invocation (``None`` → public rows only).
    Handlers never raise into the graph: failures come back as error ToolMessages whose
    text names the status (``Error: List skills failed: HTTP 503 Service Unavailable``).
    """

    @plugin_tool(
        name="list_skills",
        description=LIST_DESCRIPTION,
        args_schema=ListSkillsArgs,
        effect="read",
    )
    async def list_skills(args: ListSkillsArgs, rt_ctx: RuntimeContext[Any]) -> Any:
        try:
            invocation = await skills_invocation(rt_ctx, client.base_url)
            page = await client.list_capsules(args.limit, args.offset, invocation)
        except SkillsRegistryError as exc:
            return _tool_error(rt_ctx, "list_skills", str(exc))
        except Exception:
            rt_ctx.logger.exception("list_skills failed unexpectedly")
            return _tool_error(rt_ctx, "list_skills", _UNEXPECTED)
        ordered = private_first(page.capsules)
        return {
            "skills": [skill_entry(c) for c in ordered],
            "pagination": page.pagination.model_dump(),
            "privateSkillCount": sum(1 for c in ordered if c.private),
        }

    @plugin_tool(
        name="search_skills",
        description=SEARCH_DESCRIPTION,
        args_schema=SearchSkillsArgs,
        effect="read",
    )
    async def search_skills(args: SearchSkillsArgs, rt_ctx: RuntimeContext[Any]) -> Any:
        try:
            invocation = await skills_invocation(rt_ctx, client.base_url)
            found = await client.search_capsules(args.q, args.limit, invocation)
        except SkillsRegistryError as exc:
            return _tool_error(rt_ctx, "search_skills", str(exc))
        except Exception:
            rt_ctx.logger.exception("search_skills failed unexpectedly")
            return _tool_error(rt_ctx, "search_skills", _UNEXPECTED)
        ordered = private_first(dedupe_by_name(found))
        return {
            "query": args.q,
            "count": len(ordered),
            "privateSkillCount": sum(1 for c in ordered if c.private),
            "skills": [skill_entry(c) for c in ordered],
        }

    return [list_skills, search_skills]
