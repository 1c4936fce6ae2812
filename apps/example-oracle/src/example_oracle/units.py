"""An on-demand plugin: unit conversion, loaded only when the model asks for it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from oracle_core import OraclePlugin, PluginContext, PluginTool, RuntimeContext, plugin_tool

Unit = Literal["km", "mi", "m", "ft", "kg", "lb", "c", "f", "l", "gal"]

# Each unit as (dimension, factor to the base unit, offset); temperatures need the offset.
_UNITS: dict[str, tuple[str, float, float]] = {
    "m": ("length", 1.0, 0.0),
    "km": ("length", 1000.0, 0.0),
    "mi": ("length", 1609.344, 0.0),
    "ft": ("length", 0.3048, 0.0),
    "kg": ("mass", 1.0, 0.0),
    "lb": ("mass", 0.45359237, 0.0),
    "l": ("volume", 1.0, 0.0),
    "gal": ("volume", 3.785411784, 0.0),
    "c": ("temperature", 1.0, 0.0),
    "f": ("temperature", 5 / 9, -32.0),
}


class ConvertArgs(BaseModel):
    """Arguments of ``convert_units``."""

    model_config = ConfigDict(extra="forbid")

    value: float = Field(description="The amount to convert.")
    from_unit: Unit = Field(description="Unit of the amount.")
    to_unit: Unit = Field(description="Unit wanted.")


def convert(value: float, from_unit: str, to_unit: str) -> float:
    """Convert ``value`` between two units of one dimension."""
    dim_a, factor_a, offset_a = _UNITS[from_unit]
    dim_b, factor_b, offset_b = _UNITS[to_unit]
    if dim_a != dim_b:
        raise ValueError(f"cannot convert {dim_a} ({from_unit}) to {dim_b} ({to_unit})")
    base = (value + offset_a) * factor_a
    return base / factor_b - offset_b


class UnitsPlugin(OraclePlugin):
    """Converts lengths, masses, volumes and temperatures."""

    name = "unit-converter"
    version = "0.1.0"
    manifest = {
        "title": "Unit Converter",
        "summary": "Convert lengths, masses, volumes and temperatures between units.",
        "when_to_use": ["The user asks to convert a quantity to another unit"],
        "when_not_to_use": ["Currency conversion"],
        "examples": [
            {
                "user": "How many km is 26.2 miles?",
                "tool": "convert_units",
                "args": {"value": 26.2, "from_unit": "mi", "to_unit": "km"},
            }
        ],
        "tags": ["units", "conversion", "math"],
        "category": "data",
        "visibility": "on-demand",
        "stability": "stable",
    }

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(
            name="convert_units",
            description="Convert an amount from one unit to another.",
            args_schema=ConvertArgs,
            effect="read",
        )
        def convert_units(args: ConvertArgs, rt_ctx: RuntimeContext[Any]) -> str:
            try:
                result = convert(args.value, args.from_unit, args.to_unit)
            except ValueError as exc:
                return f"Cannot convert: {exc}"
            return f"{args.value:g} {args.from_unit} = {result:.4g} {args.to_unit}"

        return [convert_units]
