"""The one pinned shape: the envelope of ``COMPOSIO_MULTI_EXECUTE_TOOL``.

Exactly ``{"tools": [{"tool_slug": …, "arguments": {…}}], "sync_response_to_workbench":
bool}``. Models keep malforming it (a slug as a top-level key, a stray ``session`` key, a
missing flag), and the worker answers such a call with a bare 400; so the plugin checks
the envelope before any request and answers a malformed one with the right shape, built
from the call when it can be.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from oracle_plugins.composio._names import MULTI_EXECUTE_TOOL, SEARCH_TOOLS

__all__ = [
    "ENVELOPE_ERROR_CODE",
    "ENVELOPE_EXAMPLE",
    "ENVELOPE_KEYS",
    "ENVELOPE_SCHEMA",
    "ITEM_KEYS",
    "check_envelope",
]

ENVELOPE_KEYS = frozenset({"tools", "sync_response_to_workbench"})
ITEM_KEYS = frozenset({"tool_slug", "arguments"})
ENVELOPE_ERROR_CODE = "composio.execute.invalid_envelope"

ENVELOPE_EXAMPLE = (
    '{"tools": [{"tool_slug": "<SLUG returned by ' + SEARCH_TOOLS + '>", '
    '"arguments": {...}}], "sync_response_to_workbench": false}'
)

# Only descriptions below the root, no `type`, `required` or `additionalProperties`, on
# purpose: the handler is the one authority on the envelope, so every malformed call
# (a slug as a key, a missing flag, a wrong type) gets the same corrective answer, which
# shows the right shape; the runtime's generic schema check would answer some of them
# first, without it. The tool description carries the exact shape too.
ENVELOPE_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "tools": {
            "description": "Required array of the app tools to run, each an object "
            f"{{tool_slug, arguments}}: tool_slug is a slug exactly as {SEARCH_TOOLS} "
            "returned it, arguments an object as the tool's input schema describes.",
        },
        "sync_response_to_workbench": {
            "description": "Required boolean; false: each result comes back inline.",
        },
    },
}
"""The JSON schema bound for ``COMPOSIO_MULTI_EXECUTE_TOOL`` (the session's description is kept)."""

_SLUG = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")
_EXAMPLE_ARGS_CHARS = 400


def check_envelope(args: object) -> str | None:
    """Why ``args`` is not exactly the execute envelope, as a corrective message for the
    model; ``None`` when it is."""
    if not isinstance(args, Mapping):
        return _corrective("the arguments must be a JSON object")
    slugs = [k for k in args if k not in ENVELOPE_KEYS and isinstance(k, str) and _SLUG.match(k)]
    if slugs:
        return _corrective(
            f"{_names(slugs)} passed as a top-level key; an app tool is run only as an "
            "entry of the `tools` array",
            _example([(slug, args[slug]) for slug in slugs]),
        )
    extra = sorted(str(k) for k in args if k not in ENVELOPE_KEYS)
    if extra:
        return _corrective(f"unexpected top-level keys {_names(extra)}")
    tools = args.get("tools")
    if not isinstance(tools, list) or not tools:
        return _corrective("`tools` must be a non-empty array")
    for index, item in enumerate(tools):
        problem = _item_problem(index, item)
        if problem is not None:
            return problem
    if not isinstance(args.get("sync_response_to_workbench"), bool):
        return _corrective(
            "`sync_response_to_workbench` is required and must be true or false (use false)",
            _example([(item["tool_slug"], item["arguments"]) for item in tools]),
        )
    return None


def _item_problem(index: int, item: object) -> str | None:
    where = f"tools[{index}]"
    if not isinstance(item, Mapping):
        return _corrective(f"{where} must be an object {{tool_slug, arguments}}")
    slugs = [k for k in item if k not in ITEM_KEYS and isinstance(k, str) and _SLUG.match(k)]
    if slugs:
        return _corrective(
            f"{where} uses {_names(slugs)} as a key; name the tool in `tool_slug`",
            _example([(slug, item[slug]) for slug in slugs]),
        )
    extra = sorted(str(k) for k in item if k not in ITEM_KEYS)
    if extra:
        return _corrective(f"{where} has unexpected keys {_names(extra)}")
    slug = item.get("tool_slug")
    if not isinstance(slug, str) or not slug.strip():
        return _corrective(f"{where}.tool_slug must be a tool slug (a non-empty string)")
    if not isinstance(item.get("arguments"), Mapping):
        return _corrective(f"{where}.arguments must be an object (use {{}} for none)")
    return None


def _names(keys: list[str]) -> str:
    shown = ", ".join(f"'{k[:64]}'" for k in keys[:5])
    return shown + (" …" if len(keys) > 5 else "")


def _example(calls: list[tuple[str, Any]]) -> str:
    tools = []
    for slug, arguments in calls:
        text = json.dumps(arguments if isinstance(arguments, Mapping) else {}, ensure_ascii=False)
        if len(text) > _EXAMPLE_ARGS_CHARS:
            text = "{...}"
        tools.append(f'{{"tool_slug": {json.dumps(slug)}, "arguments": {text}}}')
    return f'{{"tools": [{", ".join(tools)}], "sync_response_to_workbench": false}}'


def _corrective(problem: str, example: str | None = None) -> str:
    shape = example or ENVELOPE_EXAMPLE
    return (
        f"{MULTI_EXECUTE_TOOL} was not run: {problem}. Call it again with exactly this "
        f"shape and no other keys:\n{shape}"
    )
