"""oracle-plugins-skills: find skill capsules in the IXO skills registry.

The plugin ``skills`` gives the main agent ``list_skills`` and ``search_skills`` on every
request; the user's own published (private) skills come first when the oracle can mint
an ``ixo:skills`` invocation, public skills otherwise. Skills run in the sandbox, so the
plugin depends on ``sandbox``. ``plugin`` is the instance the ``oracle.plugins`` entry
point ``skills`` names.

For the sandbox plugin, ``skills_invocation(rt_ctx, base_url)`` builds the
``X-Skills-Invocation`` header value and ``capsules_base_url(config)`` finds the registry.
"""

from oracle_plugins.skills._auth import SKILLS_ABILITY, SKILLS_CAPABILITY, skills_invocation
from oracle_plugins.skills._cid import archive_cid
from oracle_plugins.skills._client import (
    DEFAULT_TIMEOUT,
    CapsulePage,
    Pagination,
    RegistryCapsule,
    SkillsRegistryClient,
    SkillsRegistryError,
)
from oracle_plugins.skills._config import (
    DEFAULT_CAPSULES_BASE_URL,
    DEFAULT_NETWORK,
    SkillsConfig,
    capsules_base_url,
    registry_network,
)
from oracle_plugins.skills._plugin import MANIFEST, OPERATING_GUIDE, SkillsPlugin
from oracle_plugins.skills._skills import (
    SKILLS_MOUNT,
    dedupe_by_name,
    normalise_created_at,
    private_first,
    skill_entry,
)
from oracle_plugins.skills._tools import ListSkillsArgs, SearchSkillsArgs

__version__ = "0.1.0"

plugin = SkillsPlugin()
"""The instance the ``oracle.plugins`` entry point ``skills`` names."""

__all__ = [
    "DEFAULT_CAPSULES_BASE_URL",
    "DEFAULT_NETWORK",
    "DEFAULT_TIMEOUT",
    "MANIFEST",
    "OPERATING_GUIDE",
    "SKILLS_ABILITY",
    "SKILLS_CAPABILITY",
    "SKILLS_MOUNT",
    "CapsulePage",
    "ListSkillsArgs",
    "Pagination",
    "RegistryCapsule",
    "SearchSkillsArgs",
    "SkillsConfig",
    "SkillsPlugin",
    "SkillsRegistryClient",
    "SkillsRegistryError",
    "archive_cid",
    "capsules_base_url",
    "dedupe_by_name",
    "normalise_created_at",
    "plugin",
    "private_first",
    "registry_network",
    "skill_entry",
    "skills_invocation",
]
