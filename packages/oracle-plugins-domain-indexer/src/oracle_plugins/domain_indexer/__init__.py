"""oracle-plugins-domain-indexer: IXO entity lookup through the Domain Indexer.

The plugin exposes one sub-agent to the main agent, ``call_domain_indexer_agent`` ("Domain
Indexer Agent"), whose tools are ``domain_indexer_search`` and ``get_domain_card``, and
turns the prompt's operational mode into the entity context while the client reports the
entity the user is in. ``plugin`` is the instance the ``oracle.plugins`` entry point loads.
"""

from oracle_plugins.domain_indexer._catalog import SqliteCardCatalog
from oracle_plugins.domain_indexer._client import (
    DEFAULT_TIMEOUT,
    DomainIndexerBackend,
    DomainIndexerError,
    HttpDomainIndexer,
)
from oracle_plugins.domain_indexer._config import (
    DOMAIN_INDEXER_URLS,
    DomainIndexerConfig,
    resolve_base_url,
)
from oracle_plugins.domain_indexer._plugin import MANIFEST, DomainIndexerPlugin
from oracle_plugins.domain_indexer._prompts import (
    SUB_AGENT_NAME,
    entity_context_mode,
    looks_like_did,
)
from oracle_plugins.domain_indexer._tools import (
    CARD_FIELDS,
    FILTER_KEYS,
    SEARCH_SCOPES,
    DomainIndexerSearchArgs,
    GetDomainCardArgs,
    trim_domain_card,
)

__version__ = "0.1.0"

plugin = DomainIndexerPlugin()
"""The instance registered under the ``oracle.plugins`` entry point ``domain-indexer``."""

__all__ = [
    "CARD_FIELDS",
    "DEFAULT_TIMEOUT",
    "DOMAIN_INDEXER_URLS",
    "FILTER_KEYS",
    "MANIFEST",
    "SEARCH_SCOPES",
    "SUB_AGENT_NAME",
    "DomainIndexerBackend",
    "DomainIndexerConfig",
    "DomainIndexerError",
    "DomainIndexerPlugin",
    "DomainIndexerSearchArgs",
    "GetDomainCardArgs",
    "HttpDomainIndexer",
    "SqliteCardCatalog",
    "entity_context_mode",
    "looks_like_did",
    "plugin",
    "resolve_base_url",
    "trim_domain_card",
]
