"""System prompt composition (§10, CORE-65 … 75).

The prompt is rebuilt on every agent build from sixteen sections in a fixed order. Every
input arrives already resolved (hooks awaited, plugin blocks merged, state read), so
composing is a pure function: the same inputs, with a fixed clock, give the same text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo

from oracle_core._config import OracleConfig
from oracle_core._manifest import PluginManifest
from oracle_core._state import USER_CONTEXT_SLOTS
from oracle_core._tokens import count_tokens, estimate_tokens

__all__ = [
    "AGENT_NAME_MAX_CHARS",
    "CAPABILITY_BUDGET_TOKENS",
    "DEFAULT_OPERATIONAL_MODE",
    "ENTITY_DID_MAX_CHARS",
    "PROMPT_SLOTS",
    "CapabilityEntry",
    "PromptInputs",
    "PromptSection",
    "PromptSlot",
    "SystemPrompt",
    "capability_block",
    "capability_budget",
    "compose_system_prompt",
    "date_line",
    "identity_line",
    "inline_prompt_value",
    "tier1_entry",
    "time_line",
    "time_note",
]

PromptSlot = Literal["operational_mode", "editor_section", "composio_context", "user_secrets"]
"""Slots a plugin may fill through ``get_prompt_blocks`` (CORE-74)."""

PROMPT_SLOTS: tuple[str, ...] = (
    "operational_mode",
    "editor_section",
    "composio_context",
    "user_secrets",
)
"""The values of ``PromptSlot``, for checking plugin output at run time."""

CAPABILITY_BUDGET_TOKENS = 5000
"""Estimated Tier-1 tokens above which boot logs ``boot.prompt.capability_budget_exceeded``."""

DEFAULT_OPERATIONAL_MODE = (
    "General: help with whatever the user asks, using the capabilities available to you."
)
"""Section 12 text when neither a plugin block nor ``hooks.operational_mode`` sets one."""

AGENT_NAME_MAX_CHARS = 80
"""Longest ``user_preferences.agent_name`` put in the identity line; longer is cut."""

ENTITY_DID_MAX_CHARS = 200
"""Longest ``current_entity_did`` shown in section 9; longer is cut."""

_CURRENT_TIME_MAX_CHARS = 64
_PREFERENCE_MAX_CHARS = 200

# Characters that could start a new prompt line or hide text from a reader: C0/C1
# controls (newlines included), Unicode line/paragraph separators, zero-width and
# bidirectional-override characters, and the byte-order mark.
_UNSAFE_INLINE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2069\ufeff]"
)

CAPABILITIES_HEADING = "## Available Capabilities"
CUSTOM_INSTRUCTIONS_HEADING = "## Custom Instructions"

# Sections 4 and 6 are sent on every model call of every turn, so each line must earn its
# tokens; the wording is not normative (CORE-70), only what the bullets cover.
OPERATING_PRINCIPLES = """## Operating Principles
- Before saying something is impossible, check `list_capabilities()` and load what fits.
- If a request is ambiguous, ask one short question instead of guessing.
- Base answers on tool results and report what they returned; never invent results.
- When something fails, say so plainly and what the user can do about it.
- Sub-agents see none of this conversation: give each a complete, self-contained task \
with every fact, id and the expected output.
- Finish the task, then stop."""

WORKING_WITH_FILES = """## Working with Files
- Uploads and attachments reach you as references; open them with your tools before \
answering about them, and never guess their contents.
- For a file you create, give the user its name or link instead of pasting its contents."""

SLACK_FORMATTING = """## Slack Formatting
This conversation is in Slack. Use only Slack mrkdwn: *bold*, _italic_, `code`, \
code blocks, bullet lists and <url|text> links. No markdown tables or # headings; \
use short lists instead."""

_ON_DEMAND_NOTE = (
    "More capabilities can be loaded on demand: call `list_capabilities()` to see them, then "
    "load everything you need in ONE `load_capability` call passing `names`."
)

_USER_CONTEXT_LABELS: Mapping[str, str] = {
    "identity": "Who they are",
    "work": "Work",
    "goals": "Goals",
    "interests": "Interests",
    "relationships": "Relationships",
    "recent": "Recently",
}

_PREFERENCE_LABELS: Mapping[str, str] = {
    "agent_name": "Your name",
    "language": "Language",
    "tone": "Tone",
    "formality": "Formality",
    "custom_instructions": "Their instructions",
}


@dataclass(frozen=True)
class CapabilityEntry:
    """One included plugin as the prompt sees it.

    Attributes:
        name: Plugin name.
        manifest: The merged manifest (after ``manifest_overrides``).
        operating_guide: The plugin's ``operating_guide``, if any.
        has_on_demand_tools: Whether the plugin owns ``on-demand`` tools; informational,
            the prompt does not use it.
    """

    name: str
    manifest: PluginManifest
    operating_guide: str | None = None
    has_on_demand_tools: bool = False


@dataclass(frozen=True)
class PromptInputs:
    """Everything one build's system prompt is made of, already resolved.

    Attributes:
        config: The oracle's identity config.
        plugins: All included plugins in topological order, any visibility.
        loaded_plugins: ``state.loaded_plugins``; router preloads are not included, so
            they get no operating guide (CORE-71).
        user_context: Memory slots (``identity``, ``work``, ``goals``, ``interests``,
            ``relationships``, ``recent``).
        timezone: ``user.timezone``; an invalid IANA name means UTC.
        current_time: ``user.current_time`` (ISO 8601); else now in the zone.
        now: Clock for "now", for deterministic output; a naive value is taken as UTC.
        current_entity_did: The entity the user works in, as the client reported it;
            section 9 shows it through ``inline_prompt_value`` (one line, at most
            ``ENTITY_DID_MAX_CHARS`` characters).
        secret_names: Names from the user's secret index; values never reach here.
        user_secrets_context: ``hooks.user_secrets_context``; replaces the name bullets.
        user_preferences: ``state.user_preferences``; its ``agent_name``, when set,
            also replaces the oracle's name in section 1 (``identity_line``).
        plugin_blocks: ``PromptSlot`` → text, merged from ``get_prompt_blocks``.
        operational_mode: ``hooks.operational_mode``.
        editor_section: ``hooks.editor_section``.
        composio_context: ``hooks.composio_context``.
        client: ``session.client``: ``portal``, ``matrix`` or ``slack``.
        degraded: ``(plugin, what failed)`` for each contribution that failed this build.
        degraded_services_block: ``hooks.degraded_services_block``.
    """

    config: OracleConfig
    plugins: Sequence[CapabilityEntry]
    loaded_plugins: frozenset[str] = frozenset()
    user_context: Mapping[str, str | None] = field(default_factory=dict)
    timezone: str | None = None
    current_time: str | None = None
    now: datetime | None = None
    current_entity_did: str | None = None
    secret_names: Sequence[str] = ()
    user_secrets_context: str | None = None
    user_preferences: Mapping[str, Any] | None = None
    plugin_blocks: Mapping[str, str] = field(default_factory=dict)
    operational_mode: str | None = None
    editor_section: str | None = None
    composio_context: str | None = None
    client: str = "portal"
    degraded: Sequence[tuple[str, str]] = ()
    degraded_services_block: str | None = None


@dataclass(frozen=True)
class PromptSection:
    """One present section of the system prompt.

    Attributes:
        number: Position in the CORE-65 table, 1 … 16.
        key: Stable short name, e.g. ``capability_block`` or ``time``.
        text: The section as it appears in the prompt.
    """

    number: int
    key: str
    text: str


@dataclass(frozen=True)
class SystemPrompt:
    """A composed system prompt and the sections it was built from.

    Attributes:
        text: The full prompt: the sections joined by one blank line.
        sections: The present sections, in order.
    """

    text: str
    sections: tuple[PromptSection, ...]

    def token_report(self) -> dict[str, int]:
        """Real o200k_base token counts per section, in order, plus ``total``.

        ``total`` counts the full text, so it can differ from the sum of the sections by
        the few tokens the blank-line separators add or merge.
        """
        report = {section.key: count_tokens(section.text) for section in self.sections}
        report["total"] = count_tokens(self.text)
        return report


def _text(value: str | None) -> str | None:
    # Hooks and plugins often return "" for "nothing this turn"; treat blank as absent.
    if value is None or not value.strip():
        return None
    return value.strip()


def inline_prompt_value(value: object, max_chars: int) -> str | None:
    """Client- or user-supplied text made safe to interpolate inside one prompt line.

    Values such as the current entity's DID or the name a user gave the oracle arrive
    from clients; a newline in one would let it start its own ``# heading`` or bullet
    and pass for operator text. Control and invisible characters become spaces, runs
    of whitespace collapse to one space, and the result is cut to ``max_chars``.

    Args:
        value: The untrusted value; anything but a ``str`` counts as absent.
        max_chars: Longest result; a longer value is cut and ends with ``…``.

    Returns:
        One line of at most ``max_chars`` characters, or ``None`` when nothing is left.
    """
    if not isinstance(value, str):
        return None
    text = " ".join(_UNSAFE_INLINE.sub(" ", value).split())
    if not text:
        return None
    if len(text) > max_chars:
        text = text[: max_chars - 1].rstrip() + "…"
    return text


def _titled(heading: str, body: str) -> str:
    # Hook and plugin blocks ported from the TypeScript runtime usually carry their own
    # "## ..." heading; adding ours on top would print two.
    if body.startswith("## "):
        return body
    return f"{heading}\n{body}"


def identity_line(config: OracleConfig, agent_name: str | None = None) -> str:
    """Section 1: ``prompt.opening`` verbatim, else the CORE-67 fallback.

    ``agent_name`` is the name the user chose for the oracle
    (``state.user_preferences["agent_name"]``, which a plugin sets through
    ``get_turn_state``). When given, it replaces ``config.name``: in the fallback
    line, and as a whole word throughout an operator's ``prompt.opening``. It is
    reduced to one line of at most ``AGENT_NAME_MAX_CHARS`` characters first.

    Args:
        config: The oracle config.
        agent_name: The user's name for the oracle, if any.

    Returns:
        For example ``You are Ada, an AI agent operated by Acme. Helps with research.``
    """
    name = config.name.strip()
    chosen = inline_prompt_value(agent_name, AGENT_NAME_MAX_CHARS)
    if config.prompt.opening is not None:
        if chosen is None or not name or chosen == name:
            return config.prompt.opening
        whole_word = re.compile(rf"(?<!\w){re.escape(name)}(?!\w)")
        return whole_word.sub(lambda _match: chosen, config.prompt.opening)
    name = chosen or name
    org = _text(config.org)
    description = _text(config.description)
    line = f"You are {name}, an AI agent operated by {org}." if org else f"You are {name}."
    if description:
        end = "" if description.endswith((".", "!", "?")) else "."
        line = f"{line} {description}{end}"
    return line


def tier1_entry(name: str, manifest: PluginManifest) -> str:
    """One Tier-1 entry of section 3 (CORE-68).

    Args:
        name: Plugin name.
        manifest: Its merged manifest.

    Returns:
        ``- **{name}** — {summary}`` with ``When to use`` (first two entries),
        ``Avoid for`` and ``Example`` sub-bullets; an empty field drops its sub-bullet.
    """
    lines = [f"- **{name}** — {manifest.summary.strip()}"]
    when = [w.strip() for w in manifest.when_to_use if w.strip()][:2]
    if when:
        lines.append(f"  - When to use: {'; '.join(when)}")
    avoid = [w.strip() for w in manifest.when_not_to_use if w.strip()]
    if avoid:
        lines.append(f"  - Avoid for: {avoid[0]}")
    if manifest.examples:
        example = manifest.examples[0]
        args = json.dumps(example.args or {}, separators=(",", ":"), ensure_ascii=False)
        lines.append(f'  - Example: "{example.user}" → {example.tool}({args})')
    return "\n".join(lines)


def capability_block(plugins: Sequence[CapabilityEntry]) -> str | None:
    """Section 3: Tier-1 entries of ``always`` plugins and the on-demand note.

    Args:
        plugins: Included plugins in topological order.

    Returns:
        The section, or ``None`` when every plugin is ``silent`` (or there are none).
    """
    always = [p for p in plugins if p.manifest.visibility == "always"]
    on_demand = any(p.manifest.visibility == "on-demand" for p in plugins)
    if not always and not on_demand:
        return None
    parts = [CAPABILITIES_HEADING, *(tier1_entry(p.name, p.manifest) for p in always)]
    if on_demand:
        # A blank line keeps the note from reading as part of the last entry.
        parts.append(f"\n{_ON_DEMAND_NOTE}")
    return "\n".join(parts)


def capability_budget(plugins: Sequence[CapabilityEntry]) -> tuple[int, list[tuple[str, int]]]:
    """Estimate the Tier-1 cost at boot (CORE-69): ``ceil(characters / 4)`` per entry.

    Args:
        plugins: Included plugins in topological order.

    Returns:
        The summed estimate over ``always`` plugins, and the three largest entries as
        ``(name, tokens)``, largest first (ties keep topological order).
    """
    sizes = [
        (p.name, estimate_tokens(tier1_entry(p.name, p.manifest)))
        for p in plugins
        if p.manifest.visibility == "always"
    ]
    largest = sorted(sizes, key=lambda item: item[1], reverse=True)[:3]
    return sum(tokens for _, tokens in sizes), largest


def _zone(timezone: str | None) -> tuple[str, ZoneInfo]:
    if timezone and timezone.strip():
        key = timezone.strip()
        try:
            return key, ZoneInfo(key)
        except (ValueError, KeyError, OSError):
            # ZoneInfoNotFoundError is a KeyError; malformed keys raise ValueError.
            pass
    return "UTC", ZoneInfo("UTC")


def _moment(now: datetime | None) -> datetime:
    moment = now if now is not None else datetime.now(UTC)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def time_line(timezone: str | None, current_time: str | None, now: datetime | None = None) -> str:
    """The precise current time, as ``time_note`` shows it to the model (CORE-72).

    Args:
        timezone: The user's IANA zone; missing or invalid means ``UTC``.
        current_time: The user's ISO 8601 time, used verbatim when given.
        now: The clock to use otherwise (naive means UTC); defaults to the system clock.

    Returns:
        ``{current_time} ({timezone})``, e.g. ``2025-03-01T09:30:00+01:00 (Europe/Paris)``.
    """
    key, zone = _zone(timezone)
    # The client supplies the time; it must not open a line of its own.
    stamp = inline_prompt_value(current_time, _CURRENT_TIME_MAX_CHARS)
    if stamp is None:
        stamp = _moment(now).astimezone(zone).isoformat(timespec="seconds")
    return f"{stamp} ({key})"


def date_line(timezone: str | None, current_time: str | None, now: datetime | None = None) -> str:
    """The user's current date, as section 8 and sub-agent prompts show it.

    The system prompt shows the date and not the time so that it stays byte-identical
    through a day and providers can serve it from their prompt caches; the precise time
    reaches the model in ``time_note``, after the cached prefix.

    Args:
        timezone: The user's IANA zone; missing or invalid means ``UTC``.
        current_time: The user's ISO 8601 time; its own date is used when it parses.
        now: The clock to use otherwise (naive means UTC); defaults to the system clock.

    Returns:
        ``{weekday}, {YYYY-MM-DD} ({timezone})``, e.g. ``Saturday, 2025-03-01 (Europe/Paris)``.
    """
    key, zone = _zone(timezone)
    day = None
    stamp = inline_prompt_value(current_time, _CURRENT_TIME_MAX_CHARS)
    if stamp is not None:
        try:
            # The client's own wall-clock date: its offset is the user's.
            day = datetime.fromisoformat(stamp.replace("Z", "+00:00")).date()
        except ValueError:
            day = None
    if day is None:
        day = _moment(now).astimezone(zone).date()
    return f"{day.strftime('%A')}, {day.isoformat()} ({key})"


def time_note(line: str) -> str:
    """The note ``current-time`` puts before the user's latest message: ``[Current time: …]``.

    Args:
        line: A ``time_line`` value.
    """
    return f"[Current time: {line}]"


TIME_SECTION_HINT = "The exact time is noted just before the user's latest message."
"""Second line of section 8: where the precise time is (see ``time_note``)."""


def _custom_instructions(inputs: PromptInputs) -> str | None:
    parts: list[str] = []
    instructions = _text(inputs.config.prompt.custom_instructions)
    if instructions:
        parts.append(instructions)
    for plugin in inputs.plugins:
        visibility = plugin.manifest.visibility
        applies = visibility == "always" or (
            visibility != "silent" and plugin.name in inputs.loaded_plugins
        )
        guide = _text(plugin.operating_guide)
        if applies and guide:
            parts.append(f"### {plugin.manifest.title}\n{guide}")
    if not parts:
        return None
    return CUSTOM_INSTRUCTIONS_HEADING + "\n" + "\n\n".join(parts)


def _user_context(slots: Mapping[str, str | None]) -> str | None:
    lines = [
        f"- {_USER_CONTEXT_LABELS[slot]}: {value}"
        for slot in USER_CONTEXT_SLOTS
        if (value := _text(slots.get(slot)))
    ]
    if not lines:
        return None
    return "\n".join(["## What You Know About the User", *lines])


def _secrets(names: Sequence[str], context: str | None) -> str | None:
    body = _text(context)
    if body is None:
        listed = [n.strip() for n in names if n.strip()]
        if not listed:
            return None
        body = "\n".join(
            [
                "The user has stored these secrets; tools use them by name, and you never "
                "see their values:",
                *(f"- {n}" for n in listed),
            ]
        )
    return _titled("## Available User Secrets", body)


def _preferences(preferences: Mapping[str, Any] | None) -> str | None:
    if not preferences:
        return None
    lines = []
    for key, label in _PREFERENCE_LABELS.items():
        value = preferences.get(key)
        if key == "custom_instructions":
            # The user's own standing instructions: several lines are legitimate.
            text = None if value is None else _text(str(value))
        else:
            # One-line values the user typed: they must not open a heading or bullet.
            limit = AGENT_NAME_MAX_CHARS if key == "agent_name" else _PREFERENCE_MAX_CHARS
            text = None if value is None else inline_prompt_value(str(value), limit)
        if text:
            lines.append(f"- {label}: {text}")
    if not lines:
        return None
    return "\n".join(["## User Preferences", *lines])


def _degraded(failures: Sequence[tuple[str, str]], block: str | None) -> str | None:
    parts: list[str] = []
    if failures:
        parts.append(
            "\n".join(
                [
                    "These capabilities failed this turn. Do not use them; if a request "
                    "depends on one, tell the user it is unavailable right now.",
                    *(f"- **{plugin}**: {what}" for plugin, what in failures),
                ]
            )
        )
    extra = _text(block)
    if extra:
        parts.append(extra)
    if not parts:
        return None
    return _titled("## Degraded Services", "\n\n".join(parts))


def compose_system_prompt(inputs: PromptInputs) -> SystemPrompt:
    """Compose the system prompt from its sixteen sections (CORE-65).

    Values that clients or users supply and that sit inside a line (the user's name for
    the oracle, the current entity, the current time) go through
    ``inline_prompt_value``, so none of them can start a heading or a line of its own.

    Args:
        inputs: The resolved inputs of one build.

    Returns:
        The prompt and its present sections; absent sections add nothing.
    """
    prompt = inputs.config.prompt
    blocks = inputs.plugin_blocks
    mode = (
        _text(blocks.get("operational_mode"))
        or _text(inputs.operational_mode)
        or DEFAULT_OPERATIONAL_MODE
    )
    composio = _text(inputs.composio_context) or _text(blocks.get("composio_context"))
    editor = _text(inputs.editor_section) or _text(blocks.get("editor_section"))
    # The host's text, else a plugin's (how its tools reach the secrets), else the names.
    secrets_context = _text(inputs.user_secrets_context) or _text(blocks.get("user_secrets"))
    style = _text(prompt.communication_style)
    # The client supplies the entity: one line, capped, so it cannot add a heading.
    entity = inline_prompt_value(inputs.current_entity_did, ENTITY_DID_MAX_CHARS)
    preferences = inputs.user_preferences or {}

    candidates: list[tuple[int, str, str | None]] = [
        (1, "identity", identity_line(inputs.config, preferences.get("agent_name"))),
        (2, "capabilities_note", _text(prompt.capabilities)),
        (3, "capability_block", capability_block(inputs.plugins)),
        (
            4,
            "operating_principles",
            f"{OPERATING_PRINCIPLES}\n\n{style}" if style else OPERATING_PRINCIPLES,
        ),
        (5, "custom_instructions", _custom_instructions(inputs)),
        (6, "files", WORKING_WITH_FILES),
        (7, "user_context", _user_context(inputs.user_context)),
        (
            8,
            "time",
            "## Current Time\nToday is "
            + date_line(inputs.timezone, inputs.current_time, inputs.now)
            + f".\n{TIME_SECTION_HINT}",
        ),
        (
            9,
            "entity",
            f"## Current Entity\nThe user is working in entity {entity}." if entity else None,
        ),
        (10, "secrets", _secrets(inputs.secret_names, secrets_context)),
        (11, "preferences", _preferences(inputs.user_preferences)),
        (12, "operational_mode", _titled("## Operational Mode", mode)),
        (13, "composio", _titled("## Composio Context", composio) if composio else None),
        (14, "editor", _titled("## Editor", editor) if editor else None),
        (15, "slack", SLACK_FORMATTING if inputs.client == "slack" else None),
        (16, "degraded", _degraded(inputs.degraded, inputs.degraded_services_block)),
    ]
    sections = tuple(
        PromptSection(number=number, key=key, text=text) for number, key, text in candidates if text
    )
    return SystemPrompt(text="\n\n".join(s.text for s in sections), sections=sections)
