"""The tool policy (plugins spec §20.1): which tools an oracle may call, enforced at dispatch.

A plugin's manifest and tools only declare (visibility, ``effect``); what may run is decided
here, once per runtime, from the host's ``OracleConfig.tool_policy`` or the
``ORACLE_TOOL_POLICY`` variable (JSON or TOML; it replaces the host's policy when set).
Tools the policy denies are never bound, in the main agent or a sub-agent, and the
``tool-policy`` middleware refuses a call to one again, naming the rule. The runtime's own
meta-tools (``list_capabilities``, ``load_capability``, …) are outside the policy: without
them no ``on-demand`` plugin could be found.

Patterns are shell-style globs matched against the bound tool name, case-sensitively
(``fnmatch.fnmatchcase``): ``*``, ``?``, ``[seq]``, ``[!seq]``.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from oracle_core._tools import Effect

__all__ = [
    "DEFAULT_APPROVAL_TTL_SECONDS",
    "ToolPolicy",
    "ToolVerdict",
    "parse_tool_policy",
]

DEFAULT_APPROVAL_TTL_SECONDS = 900
"""How long a pending approval waits for the user's decision before it expires (15 min)."""

Action = Literal["allow", "deny", "approve"]


@dataclass(frozen=True)
class ToolVerdict:
    """What the policy says of one tool.

    Attributes:
        action: ``"allow"``, ``"deny"`` (never bound, refused at dispatch) or ``"approve"``
            (runs only after the user approves the call).
        rule: The rule that decided, as the policy's reports name it (``deny 'x*'``,
            ``not in allow``, ``approval_required 'y'``, ``effect destructive``); ``None``
            when nothing but the default ``allow`` applies.
    """

    action: Action
    rule: str | None = None


_ALLOWED = ToolVerdict("allow")


class ToolPolicy(BaseModel):
    """Which tools the agent may call, and which only with the user's approval.

    Attributes:
        allow: Globs of the tools that may be bound (default every tool). A tool no
            pattern matches is treated as denied.
        deny: Globs of tools that are never bound; wins over ``allow``.
        approval_required: Globs of tools whose calls wait for the user's approval.
        approve_destructive: Whether every ``effect="destructive"`` tool needs approval
            too (default ``True``).
        approval_ttl_seconds: How long a pending approval waits before it expires.
        data_scopes: Per-plugin read scopes, by plugin name (e.g. ``{"memory-engine":
            {"knowledge_level": "private"}}``); each plugin reads its own through
            ``RuntimeContext.data_scope``.
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )

    allow: tuple[str, ...] = ("*",)
    deny: tuple[str, ...] = ()
    approval_required: tuple[str, ...] = ()
    approve_destructive: bool = True
    approval_ttl_seconds: int = Field(DEFAULT_APPROVAL_TTL_SECONDS, gt=0, le=7 * 24 * 3600)
    data_scopes: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("allow", "deny", "approval_required")
    @classmethod
    def _patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            if not pattern.strip():
                raise ValueError("a pattern must not be empty")
            if pattern != pattern.strip():
                raise ValueError(f"pattern {pattern!r} has leading or trailing spaces")
        return value

    def verdict(self, name: str, effect: Effect | None = None) -> ToolVerdict:
        """What the policy says of the tool bound as ``name`` with ``effect``."""
        for pattern in self.deny:
            if fnmatchcase(name, pattern):
                return ToolVerdict("deny", f"deny {pattern!r}")
        if not any(fnmatchcase(name, pattern) for pattern in self.allow):
            return ToolVerdict("deny", "not in allow")
        for pattern in self.approval_required:
            if fnmatchcase(name, pattern):
                return ToolVerdict("approve", f"approval_required {pattern!r}")
        if self.approve_destructive and effect == "destructive":
            return ToolVerdict("approve", "effect destructive")
        return _ALLOWED

    def denies(self, name: str) -> bool:
        """Whether ``name`` may not be bound (``verdict(name).action == "deny"``)."""
        return self.verdict(name).action == "deny"

    def data_scope(self, plugin: str) -> Mapping[str, Any]:
        """The read scope the policy sets for ``plugin`` (empty when it sets none)."""
        return self.data_scopes.get(plugin, {})

    def rules(self) -> dict[str, Any]:
        """The policy as plain data, for ``oracle inspect`` and the API document."""
        return self.model_dump(mode="json")


def parse_tool_policy(text: str) -> ToolPolicy:
    """Read ``ORACLE_TOOL_POLICY``: a JSON object, or TOML (``deny = ["x*"]``).

    Raises:
        ValueError: The text is neither, or the policy it holds is invalid; the message
            names the field.
    """
    stripped = text.strip()
    data: Any
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
    else:
        try:
            data = tomllib.loads(stripped)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"neither a JSON object nor valid TOML ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError("must be a JSON object or a TOML table")
    try:
        return ToolPolicy.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "policy"
        raise ValueError(f"{where}: {error['msg']}") from None
