"""The example oracle: two plugins (notes, always visible; unit converter, on demand)."""

from example_oracle.notes import NotesPlugin
from example_oracle.units import UnitsPlugin

__all__ = ["NotesPlugin", "UnitsPlugin", "example_plugins"]


def example_plugins() -> list[NotesPlugin | UnitsPlugin]:
    """Fresh instances of the example's plugins."""
    return [NotesPlugin(), UnitsPlugin()]
