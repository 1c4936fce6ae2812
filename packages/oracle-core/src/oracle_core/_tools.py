"""Plugin tools and sub-agents as plugins declare them (CORE-12 … CORE-19)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from oracle_core._manifest import PluginManifest, Visibility

if TYPE_CHECKING:
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.tools import BaseTool

    from oracle_core._context import PluginContext, RuntimeContext

__all__ = [
    "Effect",
    "ModelRole",
    "PluginCapability",
    "PluginSubAgent",
    "PluginTool",
    "plugin_tool",
    "sub_agent_tool_name",
]

Effect = Literal["read", "write", "destructive"]
"""What calling a tool does: ``read`` changes nothing; ``write`` changes something;
``destructive`` deletes or overwrites what cannot be restored (a ``write`` that hosts
may want a human to approve). Listed in ``load_capability`` results; ``tool-retry``
never re-runs ``write`` or ``destructive`` tools."""
ModelRole = Literal["main", "subagent", "utility", "vision", "guard", "routing", "session-title"]
MODEL_ROLES: tuple[str, ...] = (
    "main",
    "subagent",
    "utility",
    "vision",
    "guard",
    "routing",
    "session-title",
)

TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

ToolHandler = Callable[..., Any]
"""``(args, rt_ctx) -> result``, sync or async."""
SubAgentPrompt = Callable[["PluginContext[Any]"], str]
SubAgentTools = Callable[["PluginContext[Any]"], "list[PluginTool]"]
SubAgentOnComplete = Callable[[str, "RuntimeContext[Any]"], "Awaitable[None] | None"]
SubAgentMiddlewares = Sequence["AgentMiddleware[Any, Any]"]


CAPABILITY_NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


class PluginCapability(BaseModel):
    """A capability a plugin declares besides itself, with its own manifest.

    For plugins that front several independent tool sets (each MCP server of
    ``mcp-client``): each set is listed by ``list_capabilities``, loaded by
    ``load_capability(names=[name])``, preloaded by the router and gated by the capability
    gate exactly as a plugin is, while the plugin keeps one lifespan and one config. Tools
    join it with ``PluginTool(capability=name)``.

    Attributes:
        name: Unique among every plugin's and capability's name (kebab-case).
        manifest: Its manifest (``title``, ``summary``, ``when_to_use``…; ``visibility``
            defaults to ``on-demand``, as a plugin's does).
        operating_guide: Instructions added to the prompt while it is loaded (a plugin's
            ``operating_guide``).
    """

    model_config = ConfigDict(frozen=True)

    name: str
    manifest: PluginManifest
    operating_guide: str | None = None

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not CAPABILITY_NAME_RE.fullmatch(value):
            raise ValueError(f"capability name '{value}' must be kebab-case ([a-z0-9-])")
        return value


class PluginTool(BaseModel):
    """A tool a plugin gives the model.

    Attributes:
        name: Stable tool name, unique across all tools and ``call_…`` sub-agent tools.
        description: What the model reads (prefixed with the plugin title).
        args_schema: Pydantic model of the arguments; its JSON schema is what the model
            sees. ``handler`` receives a validated instance.
        handler: ``(args, rt_ctx)``, sync or async.
        visibility: ``None`` inherits the plugin manifest's.
        effect: ``"read"``, ``"write"`` or ``"destructive"`` (see ``Effect``);
            ``write`` and ``destructive`` tools are never re-run by ``tool-retry``.
        overridable: The tool gives way to any other tool of the build with its name,
            whatever the plugin order: it is dropped, with a ``warning`` event
            (``tools.client_tool_shadowed``) to the client. For tools that a client
            supplies, which must never replace one of the oracle's.
        redact_args: ``(args) -> args`` shown to the user instead of the call's arguments
            when the call waits for approval (plugins spec §20.2): hide secrets, shorten
            long text. The call itself runs with the real arguments; the audit keeps
            only their hash.
        capability: The name of one of the plugin's own ``PluginCapability``s (from
            ``get_capabilities``) the tool belongs to instead of the plugin: it is listed,
            loaded and gated under that name, and its visibility defaults to that
            capability's.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    name: str
    description: str = Field(min_length=1)
    args_schema: type[BaseModel] | dict[str, Any]
    handler: ToolHandler
    visibility: Visibility | None = None
    effect: Effect | None = None
    overridable: bool = False
    redact_args: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    capability: str | None = None

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not TOOL_NAME_RE.fullmatch(value):
            raise ValueError(f"tool name '{value}' must match ^[A-Za-z0-9_-]{{1,64}}$")
        return value

    @field_validator("description")
    @classmethod
    def _check_description(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("description must not be empty")
        return value

    @field_validator("args_schema")
    @classmethod
    def _check_schema(cls, value: Any) -> Any:
        if isinstance(value, dict) or (isinstance(value, type) and issubclass(value, BaseModel)):
            return value
        raise ValueError("args_schema must be a pydantic BaseModel subclass")

    @classmethod
    def from_langchain(
        cls,
        tool: BaseTool,
        *,
        visibility: Visibility | None = None,
        effect: Effect | None = None,
    ) -> PluginTool:
        """Adapt a LangChain tool (e.g. from MCP adapters), keeping schema and description.

        The handler receives the arguments as a plain ``dict`` when the LangChain tool
        describes them by JSON schema, otherwise the validated model.
        """
        schema: type[BaseModel] | dict[str, Any]
        raw_schema = tool.args_schema
        if isinstance(raw_schema, dict) or (
            isinstance(raw_schema, type) and issubclass(raw_schema, BaseModel)
        ):
            schema = raw_schema
        else:
            schema = tool.tool_call_schema.model_json_schema()  # type: ignore[union-attr]

        async def handler(args: Any, rt_ctx: RuntimeContext[Any]) -> Any:
            payload = args.model_dump() if isinstance(args, BaseModel) else dict(args)
            return await tool.ainvoke(payload)

        return cls(
            name=tool.name,
            description=tool.description or tool.name,
            args_schema=schema,
            handler=handler,
            visibility=visibility,
            effect=effect,
        )


def plugin_tool(
    *,
    name: str,
    description: str,
    args_schema: type[BaseModel],
    visibility: Visibility | None = None,
    effect: Effect | None = None,
    redact_args: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Callable[[ToolHandler], PluginTool]:
    """Decorator that turns a handler ``(args, rt_ctx)`` into a ``PluginTool``.

    Example:
        >>> class Args(BaseModel):
        ...     city: str
        >>> @plugin_tool(name="get_weather", description="Weather for a city.", args_schema=Args)
        ... async def get_weather(args: Args, rt_ctx): ...
    """

    def decorate(handler: ToolHandler) -> PluginTool:
        return PluginTool(
            name=name,
            description=description,
            args_schema=args_schema,
            handler=handler,
            visibility=visibility,
            effect=effect,
            redact_args=redact_args,
        )

    return decorate


def normalise_sub_agent_name(name: str) -> str:
    """Lower case, runs of whitespace become ``_``."""
    return re.sub(r"\s+", "_", name.strip()).lower()


def sub_agent_tool_name(name: str) -> str:
    """The main-agent tool name of a sub-agent (CORE-17)."""
    normalised = normalise_sub_agent_name(name)
    if normalised.startswith("call_"):
        return normalised
    if normalised.endswith("_agent"):
        return f"call_{normalised}"
    return f"call_{normalised}_agent"


class PluginSubAgent(BaseModel):
    """A sub-agent the main agent calls as one tool (CORE-16).

    Attributes:
        name: Normalised to lower case with ``_`` for whitespace.
        description: Reads like a tool description.
        system_prompt: Text or ``(ctx) -> text``.
        tools: The sub-agent's own tools, or ``(ctx) -> tools``; never gated.
        model: Model role serving the sub-agent.
        middlewares: Run only inside the sub-agent.
        forward_tools: ``True`` (all) or names of inner tools whose calls are forwarded
            into the parent thread.
        on_complete: ``(result_text, rt_ctx)`` run in the background after success.
        visibility: ``None`` inherits the manifest.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    name: str
    description: str = Field(min_length=1)
    # Callables are typed loosely for pydantic; the aliases above document the shapes.
    system_prompt: str | Callable[..., str]
    tools: list[PluginTool] | Callable[..., list[PluginTool]] = Field(default_factory=list)
    model: ModelRole = "subagent"
    middlewares: Sequence[Any] = ()
    forward_tools: bool | list[str] = False
    on_complete: Callable[..., Awaitable[None] | None] | None = None
    visibility: Visibility | None = None

    @field_validator("name")
    @classmethod
    def _normalise(cls, value: str) -> str:
        normalised = normalise_sub_agent_name(value)
        if not normalised:
            raise ValueError("sub-agent name must not be empty")
        return normalised

    @property
    def tool_name(self) -> str:
        """The ``call_…`` tool name the main agent sees."""
        return sub_agent_tool_name(self.name)


class ToolInfo(BaseModel):
    """What the framework middleware know about one tool bound in a build.

    Attributes:
        name: Tool name as bound (``call_…`` for sub-agents).
        owner: Owning plugin, or ``None`` for the meta-tools.
        visibility: Effective visibility (tool's own, else the plugin manifest's).
        effect: ``"read"``, ``"write"``, ``"destructive"`` or unknown.
        capability: The plugin-declared capability it belongs to, if any.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    owner: str | None
    visibility: Visibility
    effect: Effect | None = None
    capability: str | None = None

    @property
    def loaded_as(self) -> str | None:
        """The name ``load_capability`` loads it by: its capability, else its plugin."""
        return self.capability or self.owner
