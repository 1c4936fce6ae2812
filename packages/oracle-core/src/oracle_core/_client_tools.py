"""Tools a client declares: browser tools and AG-UI actions, described by JSON Schema.

A client sends ``{name, description, schema}`` for each tool it can run. Each becomes a
``PluginTool`` whose pydantic argument model is generated from that JSON Schema
(``json-schema-to-pydantic``), so the model sees the client's own schema and a call is
validated before it leaves for the client; its handler is a frontend call
(``rt_ctx.frontend.call``). A schema that cannot become a model is refused with
``ClientSchemaError`` naming the tool and the problem, never half-used: the schema is
checked against its JSON Schema meta-schema first, and a property the generator would
drop fails the whole tool.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from oracle_core._errors import OracleError
from oracle_core._frontend import FrontendCallKind
from oracle_core._tools import TOOL_NAME_RE, PluginSubAgent, PluginTool

if TYPE_CHECKING:
    from oracle_core._context import RuntimeContext

__all__ = [
    "ClientSchemaError",
    "ClientToolSpec",
    "ClientTools",
    "client_args_model",
    "frontend_tools",
]

SCHEMA_CODE = "tools.client_schema_invalid"


class ClientSchemaError(OracleError):
    """A client's tool cannot be offered: its name or JSON Schema is unusable."""

    code = SCHEMA_CODE


class ClientToolSpec(BaseModel):
    """One tool a client declared (``tools`` / ``agActions`` entries)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    name: str
    description: str = ""
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    has_render: bool | None = Field(default=None, alias="hasRender")


def client_args_model(schema: Mapping[str, Any], *, name: str) -> type[BaseModel]:
    """The pydantic model of a client's argument schema (an object schema).

    A schema without ``type`` is taken as an object. Extra keys the client's schema
    forbids (``additionalProperties: false``) are refused.

    Raises:
        ClientSchemaError: The schema is not valid JSON Schema, not an object schema, or
            holds something the generator cannot turn into a field.
    """
    from json_schema_to_pydantic import create_model

    raw = dict(schema)
    raw.setdefault("type", "object")
    if raw["type"] != "object":
        raise ClientSchemaError(f"tool {name!r}: its schema must describe an object")
    try:
        jsonschema.validators.validator_for(raw).check_schema(raw)
    except jsonschema.SchemaError as exc:
        raise ClientSchemaError(f"tool {name!r}: invalid JSON Schema: {exc.message}") from None
    base = _StrictArgs if raw.get("additionalProperties") is False else _Args
    try:
        model: type[BaseModel] = create_model(
            _without_formats(raw),
            base_model_type=base,
            allow_undefined_type=True,
            allow_undefined_array_items=True,
            populate_by_name=True,
        )
    except Exception as exc:  # the generator raises its own and pydantic's errors
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ClientSchemaError(f"tool {name!r}: cannot build its arguments: {detail}") from None
    fields = set(model.model_json_schema(by_alias=True).get("properties", {}))
    lost = sorted(set(raw.get("properties") or {}) - fields)
    if lost:
        raise ClientSchemaError(
            f"tool {name!r}: cannot build its arguments: property {lost[0]!r} is not "
            "usable as a field name"
        )
    return model


def _without_formats(node: Any) -> Any:
    """``node`` without string ``format`` keywords: the generator turns ``uri`` or
    ``date-time`` strings into URL and datetime fields, which would hand the client a
    rewritten value (``https://x`` becomes ``https://x/``)."""
    if isinstance(node, Mapping):
        return {
            key: _without_formats(value)
            for key, value in node.items()
            if not (key == "format" and isinstance(value, str))
        }
    if isinstance(node, list):
        return [_without_formats(item) for item in node]
    return node


class _Args(BaseModel):
    model_config = ConfigDict(extra="allow")


class _StrictArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _dump(args: Any) -> dict[str, Any]:
    if isinstance(args, BaseModel):
        return args.model_dump(by_alias=True, exclude_unset=True, mode="json")
    return dict(args) if isinstance(args, Mapping) else {}


@dataclass(frozen=True)
class ClientTools:
    """What a client's declarations became: the tools, and one line per refused one."""

    tools: list[PluginTool]
    problems: list[str]

    def report(self, rt_ctx: RuntimeContext[Any]) -> None:
        """Tell the client about each refused tool (a ``warning`` event with code
        ``tools.client_schema_invalid``) and log that some were refused."""
        for problem in self.problems:
            if rt_ctx.emit is not None:
                rt_ctx.emit.warning({"code": SCHEMA_CODE, "message": problem})
        if self.problems:
            # The count only: the names and schemas are the client's.
            rt_ctx.logger.warning("%s: %d client tool(s) refused", SCHEMA_CODE, len(self.problems))

    def sub_agent(
        self,
        *,
        name: str,
        description: str,
        system_prompt: Callable[[list[PluginTool]], str],
        forward_tools: bool = False,
    ) -> list[PluginSubAgent]:
        """The sub-agent whose tools these are, or none when there are no tools."""
        if not self.tools:
            return []
        return [
            PluginSubAgent(
                name=name,
                description=description,
                system_prompt=system_prompt(self.tools),
                tools=self.tools,
                forward_tools=forward_tools,
            )
        ]


def frontend_tools(
    kind: FrontendCallKind,
    declared: Any,
    *,
    timeout: float | None = None,
) -> ClientTools:
    """One ``write`` tool per declared entry, each a frontend call of ``kind``.

    Args:
        kind: ``browser_tool`` or ``action``.
        declared: The client's list (``state.browser_tools`` / ``state.ag_actions``);
            anything but a list gives no tools.
        timeout: Seconds each call waits for the client (the host's default when
            ``None``).

    Returns:
        The tools, and for each entry that could not be used a line saying why
        (``ClientSchemaError`` text). Later entries with a name already taken are
        refused too.
    """
    if not isinstance(declared, Sequence) or isinstance(declared, str | bytes):
        return ClientTools([], [])
    tools: list[PluginTool] = []
    problems: list[str] = []
    seen: set[str] = set()
    for entry in declared:
        try:
            spec = ClientToolSpec.model_validate(entry)
            if not TOOL_NAME_RE.fullmatch(spec.name):
                raise ClientSchemaError(
                    f"tool {spec.name[:64]!r}: a name is 1 to 64 letters, digits, _ or -"
                )
            if spec.name in seen:
                raise ClientSchemaError(f"tool {spec.name!r}: declared twice")
            tools.append(
                _tool(kind, spec, client_args_model(spec.schema_, name=spec.name), timeout)
            )
            seen.add(spec.name)
        except ClientSchemaError as exc:
            problems.append(exc.message)
        except ValidationError as exc:
            problems.append(f"a declared tool is malformed: {exc.errors()[0]['msg']}")
    return ClientTools(tools, problems)


def _tool(
    kind: FrontendCallKind, spec: ClientToolSpec, model: type[BaseModel], timeout: float | None
) -> PluginTool:
    name = spec.name

    async def run(args: Any, rt_ctx: RuntimeContext[Any]) -> Any:
        if rt_ctx.frontend is None:
            raise RuntimeError("no frontend calls in this context")
        return await rt_ctx.frontend.call(kind, name, _dump(args), timeout=timeout)

    return PluginTool(
        name=name,
        description=spec.description.strip() or name,
        args_schema=model,
        handler=run,
        # A client's tool may change what the user sees: never re-run by tool-retry.
        effect="write",
    )
