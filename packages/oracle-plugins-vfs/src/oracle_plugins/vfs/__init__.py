"""``vfs``: not built yet; off until it is."""

from collections.abc import Mapping

from oracle_core import OraclePlugin

__all__ = ["VfsPlugin", "plugin"]


class VfsPlugin(OraclePlugin):
    """Placeholder: never on."""

    name = "vfs"
    version = "0.0.0"
    manifest = {
        "title": "vfs",
        "summary": "Not built yet.",
        "category": "core",
        "visibility": "silent",
        "stability": "experimental",
    }

    def auto_detect(self, env: Mapping[str, str]) -> bool:
        return False


plugin = VfsPlugin()
"""The instance the ``oracle.plugins`` entry point ``vfs`` names."""
