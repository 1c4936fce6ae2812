"""Plugin manifests: the model, the hard and soft validation rules, and overrides."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

__all__ = [
    "Category",
    "ManifestBackends",
    "ManifestExample",
    "ManifestValidationResult",
    "PluginManifest",
    "Stability",
    "Visibility",
    "apply_manifest_override",
    "validate_manifest",
]

Visibility = Literal["always", "on-demand", "silent"]
Category = Literal[
    "data",
    "communication",
    "automation",
    "memory",
    "integration",
    "ui",
    "auth",
    "observability",
    "core",
]
Stability = Literal["stable", "beta", "experimental"]

SUMMARY_MAX = 120
WHEN_TO_USE_MAX_ENTRIES = 8
WHEN_TO_USE_MAX_CHARS = 100
WHEN_NOT_TO_USE_MAX_ENTRIES = 4
WHEN_NOT_TO_USE_MAX_CHARS = 80
EXAMPLES_MAX = 3


class _ManifestModel(BaseModel):
    # snake_case in Python, camelCase accepted because manifests are often ported from TypeScript.
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        str_strip_whitespace=False,
    )


class ManifestExample(_ManifestModel):
    """One worked example: what a user says and which tool answers it.

    Attributes:
        user: The user's words.
        thought: Optional reasoning the model could follow.
        tool: Name of a tool or ``call_…`` sub-agent tool of the same plugin.
        args: Arguments of the call, rendered as compact JSON in the prompt.
    """

    user: str
    thought: str | None = None
    tool: str
    args: dict[str, Any] | None = None


class ManifestBackends(_ManifestModel):
    """The backends a plugin can run on, and the variable that tells it which one.

    The runtime chooses (03-plugins §0): the backend named by ``variable`` when it is set;
    else ``default`` when the plugin's ``auto_detect`` passes; else ``embedded`` when the
    plugin is forced on by ``features`` or the oracle runs with ``ORACLE_BACKEND=local``.
    When it chooses ``embedded`` itself, it sets ``variable`` in the environment the
    plugin's ``config_schema`` reads, so the plugin opens that backend.

    Attributes:
        variable: The environment variable naming the backend, e.g. ``MEMORY_BACKEND``.
        default: The backend with the plugin's outside service, e.g. ``remote``.
        embedded: The backend that runs in process with no outside service, or ``None``
            when the plugin has none (forcing it on without its service then fails boot
            with ``boot.plugin.env_missing``).
        local: Whether ``ORACLE_BACKEND=local`` alone picks ``embedded``. ``False`` for
            an embedded backend that needs what a machine may lack or that the operator
            should choose knowingly (the sandbox's bubblewrap): it then runs only when
            ``variable`` names it or the plugin is forced on.
    """

    variable: str
    default: str
    embedded: str | None = None
    local: bool = True


class PluginManifest(_ManifestModel):
    """What the model and the operator learn about a plugin.

    Field names are snake_case; the TypeScript camelCase spellings (``whenToUse``) are
    accepted on input and produced by ``model_dump(by_alias=True)``. ``backends`` is for
    the runtime and the operator only: the model never reads it.
    """

    title: str
    summary: str
    when_to_use: list[str] = []
    when_not_to_use: list[str] = []
    examples: list[ManifestExample] = []
    tags: list[str] = []
    category: Category | None = None
    visibility: Visibility = "on-demand"
    stability: Stability | None = None
    backends: ManifestBackends | None = None

    def to_wire(self) -> dict[str, Any]:
        """The manifest as the model reads it: camelCase keys, unset optionals dropped."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"backends"})


@dataclass(frozen=True)
class ManifestValidationResult:
    """Outcome of ``validate_manifest``.

    Attributes:
        valid: True when no hard rule failed.
        errors: Hard-rule messages, ``[boot-error] [plugin] path: text``.
        warnings: Soft-rule messages, ``[boot-warning] [plugin] path: text``.
        manifest: The parsed manifest when the structure was valid.
    """

    valid: bool
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    manifest: PluginManifest | None = field(default=None, compare=False)


def _pydantic_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path or "manifest"


def parse_manifest(
    manifest: PluginManifest | Mapping[str, Any], plugin_name: str
) -> tuple[PluginManifest | None, list[str]]:
    """Parse a manifest into the model, turning pydantic errors into boot messages."""
    if isinstance(manifest, PluginManifest):
        return manifest, []
    checked: object = manifest  # plugins are untyped code: check, don't trust the annotation
    if not isinstance(checked, Mapping):
        return None, [f"[boot-error] [{plugin_name}] manifest: expected a mapping"]
    try:
        return PluginManifest.model_validate(dict(manifest)), []
    except ValidationError as exc:
        errors = []
        for err in exc.errors():
            path = _pydantic_path(err["loc"])
            errors.append(f"[boot-error] [{plugin_name}] {path}: {err['msg']}")
        return None, errors


@dataclass
class _Findings:
    """The messages of one manifest check, in the order the rules run."""

    plugin_name: str
    errors: list[str]
    warnings: list[str] = field(default_factory=list)

    def hard(self, path: str, text: str) -> None:
        """Record a broken rule that makes the manifest invalid."""
        self.errors.append(f"[boot-error] [{self.plugin_name}] {path}: {text}")

    def soft(self, path: str, text: str) -> None:
        """Record a rule the manifest should follow but may break."""
        self.warnings.append(f"[boot-warning] [{self.plugin_name}] {path}: {text}")


# (field, most entries, most characters per entry or None when entries are not text)
_LIST_LIMITS: tuple[tuple[str, int, int | None], ...] = (
    ("when_to_use", WHEN_TO_USE_MAX_ENTRIES, WHEN_TO_USE_MAX_CHARS),
    ("when_not_to_use", WHEN_NOT_TO_USE_MAX_ENTRIES, WHEN_NOT_TO_USE_MAX_CHARS),
    ("examples", EXAMPLES_MAX, None),
)


def validate_manifest(
    manifest: PluginManifest | Mapping[str, Any],
    plugin_name: str,
    tool_names: Collection[str] | None = None,
) -> ManifestValidationResult:
    """Check a manifest against every hard and soft rule of CORE-21.

    Args:
        manifest: A ``PluginManifest`` or a mapping in either key style.
        plugin_name: Owner, used in the messages.
        tool_names: The plugin's boot-time tool and ``call_…`` names; ``None`` skips the
            example cross-check, and so does an empty set (tools that only arrive per
            request cannot be checked at boot).

    Returns:
        The result; it never raises for bad input.
    """
    parsed, errors = parse_manifest(manifest, plugin_name)
    if parsed is None:
        return ManifestValidationResult(valid=False, errors=tuple(errors))
    findings = _Findings(plugin_name, errors)
    _check_title_and_summary(parsed, findings)
    _check_when_to_use_present(parsed, findings)
    _check_list_limits(parsed, findings)
    if tool_names:
        _check_example_tools(parsed, set(tool_names), findings)
    _check_tags(parsed, findings)
    return ManifestValidationResult(
        valid=not findings.errors,
        errors=tuple(findings.errors),
        warnings=tuple(findings.warnings),
        manifest=parsed,
    )


def _check_title_and_summary(parsed: PluginManifest, findings: _Findings) -> None:
    if not parsed.title.strip():
        findings.hard("title", "must not be empty")
    if not parsed.summary.strip():
        findings.hard("summary", "must not be empty")
    elif len(parsed.summary) > SUMMARY_MAX:
        findings.soft(
            "summary", f"is {len(parsed.summary)} characters; keep it under {SUMMARY_MAX}"
        )


def _check_when_to_use_present(parsed: PluginManifest, findings: _Findings) -> None:
    # A silent plugin's manifest never reaches the model (no prompt entry, not listed by
    # list_capabilities), so nothing would read its when_to_use.
    if parsed.visibility == "silent" or any(w.strip() for w in parsed.when_to_use):
        return
    article = "an" if parsed.visibility.startswith(("a", "o")) else "a"
    findings.hard(
        "when_to_use",
        f"must list at least one entry for {article} {parsed.visibility} plugin",
    )


def _check_list_limits(parsed: PluginManifest, findings: _Findings) -> None:
    for name, max_entries, max_chars in _LIST_LIMITS:
        entries: list[Any] = getattr(parsed, name)
        if len(entries) > max_entries:
            findings.soft(name, f"has {len(entries)} entries; keep at most {max_entries}")
        if max_chars is None:
            continue
        for i, entry in enumerate(entries):
            if len(entry) > max_chars:
                findings.soft(
                    f"{name}[{i}]", f"is {len(entry)} characters; keep it under {max_chars}"
                )


def _check_example_tools(parsed: PluginManifest, known: set[str], findings: _Findings) -> None:
    for i, example in enumerate(parsed.examples):
        if example.tool not in known:
            findings.hard(
                f"examples[{i}].tool",
                f"'{example.tool}' is not a tool of this plugin "
                f"(known: {', '.join(sorted(known))})",
            )


def _check_tags(parsed: PluginManifest, findings: _Findings) -> None:
    for i, tag in enumerate(parsed.tags):
        if tag != tag.lower():
            findings.hard(f"tags[{i}]", f"'{tag}' must be lower case")


def _field_name(key: str) -> str | None:
    for name, info in PluginManifest.model_fields.items():
        if key in (name, info.alias):
            return name
    return None


def apply_manifest_override(
    manifest: PluginManifest, override: Mapping[str, Any], plugin_name: str
) -> tuple[PluginManifest | None, list[str]]:
    """Shallow-merge a partial manifest into ``manifest`` (CORE-24).

    ``None`` values are ignored, lists and dicts replace wholesale, either key style is
    accepted. Returns the merged manifest (not yet rule-checked) or the hard errors.
    """
    merged = manifest.model_dump()
    errors: list[str] = []
    for key, value in override.items():
        name = _field_name(key)
        if name is None:
            errors.append(
                f"[boot-error] [{plugin_name}] manifest_overrides.{key}: unknown manifest field"
            )
        elif value is not None:
            merged[name] = value
    if errors:
        return None, errors
    return parse_manifest(merged, plugin_name)
