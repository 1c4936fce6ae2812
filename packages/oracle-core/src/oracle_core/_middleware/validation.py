"""``tool-validation``: invalid tool arguments become a message the model can act on."""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
)
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolInvocationError
from langgraph.types import Command
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from oracle_core._middleware._common import error_tool_message

__all__ = ["ToolValidationMiddleware", "describe_validation_errors"]

# Argument names LangGraph's ToolNode fills in itself; the model never supplies them.
_ALWAYS_INJECTED = frozenset({"runtime"})
# Provider-specific content blocks that carry a tool call next to `AIMessage.tool_calls`.
_TOOL_CALL_BLOCK_TYPES = frozenset({"tool_use", "tool_call", "function_call"})


def describe_validation_errors(errors: Iterable[ErrorDetails]) -> list[str]:
    """One ``field: problem`` line per pydantic error."""
    lines = []
    for error in errors:
        location = ".".join(str(part) for part in error.get("loc", ())) or "(arguments)"
        lines.append(f"{location}: {error.get('msg', 'invalid value')}")
    return lines


def _invalid_arguments_message(tool_name: str, problems: Sequence[str]) -> str:
    bullets = "\n".join(f"- {problem}" for problem in problems)
    return (
        f"Invalid arguments for tool '{tool_name}'; the tool was not run.\n{bullets}\n"
        f"Call '{tool_name}' again with corrected arguments. Do not repeat the same arguments."
    )


# Injected fields by argument schema, for tools whose call schema follows from it alone.
_INJECTED_BY_SCHEMA: weakref.WeakKeyDictionary[type[BaseModel], frozenset[str]] = (
    weakref.WeakKeyDictionary()
)


def _schema_decides(tool: BaseTool) -> bool:
    """Whether ``tool``'s call schema is LangChain's, derived from ``args_schema`` only."""
    kind = type(tool)
    return (
        kind.get_input_schema is BaseTool.get_input_schema
        and kind.tool_call_schema is BaseTool.tool_call_schema
    )


def _injected_fields(tool: BaseTool, schema: type[BaseModel]) -> frozenset[str]:
    """Fields of ``schema`` the tool node injects rather than the model.

    Per-turn tools are new objects each turn, so LangChain's memo of the call schema (per
    tool object) never hits for them; where the schema alone decides, the answer is kept
    per schema class instead.
    """
    if not _schema_decides(tool):
        return _derive_injected(tool, schema)
    known = _INJECTED_BY_SCHEMA.get(schema)
    if known is None:
        known = _INJECTED_BY_SCHEMA[schema] = _derive_injected(tool, schema)
    return known


def _derive_injected(tool: BaseTool, schema: type[BaseModel]) -> frozenset[str]:
    names = set(_ALWAYS_INJECTED)
    try:
        call_schema = tool.tool_call_schema
    except Exception:  # a broken schema is the tool's problem; report it at invocation
        return frozenset(names)
    # `tool_call_schema` is the args schema minus injected arguments (state, store,
    # runtime, tool-call id): what is missing from it is what the model never sends.
    if isinstance(call_schema, type) and issubclass(call_schema, BaseModel):
        names |= set(schema.model_fields) - set(call_schema.model_fields)
    return frozenset(names)


def _argument_problems(request: ToolCallRequest) -> list[str]:
    """Problems with the call's arguments; empty when valid or not checkable here."""
    tool = request.tool
    if tool is None:
        return []
    schema = tool.args_schema
    if isinstance(schema, Mapping):
        # A JSON-schema tool (an MCP tool's, bound verbatim) is checked at the edge too:
        # a call the schema refuses never reaches the server.
        return _json_schema_problems(schema, request.tool_call.get("args") or {})
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return []
    injected = _injected_fields(tool, schema)
    args = request.tool_call.get("args") or {}
    payload = {key: value for key, value in args.items() if key not in injected}
    try:
        schema.model_validate(payload)
    except ValidationError as exc:
        errors = [
            error
            for error in exc.errors(include_url=False)
            if not (error["loc"] and error["loc"][0] in injected)
        ]
        return describe_validation_errors(errors)
    except Exception:  # a validator raising something odd: let the tool itself decide
        return []
    return []


# Validators by schema object: per-turn tools are new objects, their schemas often not.
_VALIDATORS: dict[int, tuple[Mapping[str, Any], Any]] = {}
_VALIDATOR_CACHE_SIZE = 1024
_MAX_PROBLEMS = 10


def _validator(schema: Mapping[str, Any]) -> Any:
    """A ``jsonschema`` validator of ``schema`` (its declared draft, else 2020-12, as MCP
    uses); ``None`` for a schema that is not valid itself (the tool then decides)."""
    import jsonschema

    cached = _VALIDATORS.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    kind = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        kind.check_schema(dict(schema))
        validator: Any = kind(schema)
    except jsonschema.SchemaError:
        validator = None
    if len(_VALIDATORS) >= _VALIDATOR_CACHE_SIZE:
        _VALIDATORS.pop(next(iter(_VALIDATORS)))
    _VALIDATORS[id(schema)] = (schema, validator)
    return validator


def _json_schema_problems(schema: Mapping[str, Any], args: Mapping[str, Any]) -> list[str]:
    validator = _validator(schema)
    if validator is None:
        return []
    payload = {key: value for key, value in args.items() if key not in _ALWAYS_INJECTED}
    errors = sorted(validator.iter_errors(payload), key=lambda error: list(error.path))
    problems = []
    for error in errors[:_MAX_PROBLEMS]:
        location = ".".join(str(part) for part in error.path) or "(arguments)"
        problems.append(f"{location}: {error.message}")
    return problems


def _handler_error_problems(exc: Exception) -> list[str]:
    if isinstance(exc, ToolInvocationError):
        if exc.filtered_errors is not None:
            return describe_validation_errors(exc.filtered_errors)
        return describe_validation_errors(exc.source.errors(include_url=False))
    if isinstance(exc, ValidationError):
        return describe_validation_errors(exc.errors(include_url=False))
    return [str(exc)]


def _has_content(content: str | list[str | dict[str, Any]]) -> bool:
    if isinstance(content, str):
        return bool(content.strip())
    for block in content:
        if isinstance(block, str):
            if block.strip():
                return True
        elif block.get("type") != "text" or block.get("text"):
            return True
    return False


def _without_tool_calls(message: AIMessage, call_ids: frozenset[str]) -> AIMessage | None:
    """A copy of ``message`` minus the calls in ``call_ids``; ``None`` when nothing is left."""
    tool_calls = [call for call in message.tool_calls if call.get("id") not in call_ids]
    invalid_calls = [call for call in message.invalid_tool_calls if call.get("id") not in call_ids]
    additional_kwargs = dict(message.additional_kwargs)
    # Some providers serialise from the raw calls when present; keep them consistent.
    raw_calls = additional_kwargs.get("tool_calls")
    if isinstance(raw_calls, list):
        kept = [
            raw for raw in raw_calls if not (isinstance(raw, Mapping) and raw.get("id") in call_ids)
        ]
        if kept:
            additional_kwargs["tool_calls"] = kept
        else:
            del additional_kwargs["tool_calls"]
    content = message.content
    if isinstance(content, list):
        content = [
            block
            for block in content
            if not (
                isinstance(block, Mapping)
                and block.get("type") in _TOOL_CALL_BLOCK_TYPES
                and block.get("id") in call_ids
            )
        ]
    if not tool_calls and not invalid_calls and not _has_content(content):
        return None
    return message.model_copy(
        update={
            "content": content,
            "tool_calls": tool_calls,
            "invalid_tool_calls": invalid_calls,
            "additional_kwargs": additional_kwargs,
        }
    )


class ToolValidationMiddleware(AgentMiddleware[AgentState[Any], Any]):
    """Turns invalid tool arguments into an error ``ToolMessage`` (CORE-77).

    LangGraph's tool node converts argument errors into a generic message before a
    ``wrap_tool_call`` sees them, so this middleware validates the arguments against the
    tool's pydantic ``args_schema`` first; an invalid call is answered with the tool name,
    each invalid field and its problem, and is never run. ``ToolInvocationError`` and
    pydantic ``ValidationError`` raised by the handler are answered the same way; other
    errors propagate.

    On each model call it also removes from the request (never from the state) the
    ``ToolMessage``s of ``skip_tool_names`` and their tool calls, so the request stays
    well-formed.

    Args:
        skip_tool_names: Tools whose results the model should not see again.
    """

    def __init__(self, skip_tool_names: Sequence[str] = ()) -> None:
        super().__init__()
        self._skip = frozenset(skip_tool_names)

    @property
    def name(self) -> str:
        """The reserved name ``tool-validation``."""
        return "tool-validation"

    def _strip_skipped(self, messages: Sequence[AnyMessage]) -> list[AnyMessage] | None:
        """``messages`` without skipped tool results and calls; ``None`` if unchanged."""
        if not self._skip:
            return None
        dropped: set[str] = set()
        for message in messages:
            if isinstance(message, ToolMessage) and message.name in self._skip:
                dropped.add(message.tool_call_id)
            elif isinstance(message, AIMessage):
                dropped.update(
                    call_id
                    for call in message.tool_calls
                    if call["name"] in self._skip and (call_id := call.get("id"))
                )
        if not dropped:
            return None
        call_ids = frozenset(dropped)
        kept: list[AnyMessage] = []
        for message in messages:
            if isinstance(message, ToolMessage) and message.tool_call_id in call_ids:
                continue
            if isinstance(message, AIMessage):
                trimmed = _without_tool_calls(message, call_ids)
                if trimmed is None:
                    continue
                kept.append(trimmed)
                continue
            kept.append(message)
        return kept

    def _model_request(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        messages = self._strip_skipped(request.messages)
        return request if messages is None else request.override(messages=messages)

    def _invalid_reply(self, request: ToolCallRequest) -> ToolMessage | None:
        problems = _argument_problems(request)
        if not problems:
            return None
        return error_tool_message(
            request, _invalid_arguments_message(request.tool_call["name"], problems)
        )

    def _error_reply(self, request: ToolCallRequest, exc: Exception) -> ToolMessage:
        problems = _handler_error_problems(exc)
        return error_tool_message(
            request, _invalid_arguments_message(request.tool_call["name"], problems)
        )

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        """Call the model without the skipped tools' messages."""
        return handler(self._model_request(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        """Async form of ``wrap_model_call``."""
        return await handler(self._model_request(request))

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Run the tool only with valid arguments."""
        invalid = self._invalid_reply(request)
        if invalid is not None:
            return invalid
        try:
            return handler(request)
        except (ToolInvocationError, ValidationError) as exc:
            return self._error_reply(request, exc)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async form of ``wrap_tool_call``."""
        invalid = self._invalid_reply(request)
        if invalid is not None:
            return invalid
        try:
            return await handler(request)
        except (ToolInvocationError, ValidationError) as exc:
            return self._error_reply(request, exc)
