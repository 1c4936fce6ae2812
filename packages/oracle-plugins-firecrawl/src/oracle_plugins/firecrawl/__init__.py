"""oracle-plugins-firecrawl: the Firecrawl Agent, web search and page reading for the oracle.

``plugin`` is the instance the ``oracle.plugins`` entry point ``firecrawl`` names; pass
your own ``FirecrawlPlugin(...)`` in ``plugins=`` to change its options. The protocol
double is ``oracle_plugins.firecrawl.testing.FirecrawlDouble``.
"""

from oracle_plugins.firecrawl._config import FirecrawlConfig, wants_firecrawl
from oracle_plugins.firecrawl._plugin import FirecrawlPlugin
from oracle_plugins.firecrawl._prompts import (
    MANIFEST,
    SCRAPE_TOOL,
    SEARCH_TOOL,
    SUB_AGENT_DESCRIPTION,
    SUB_AGENT_NAME,
    SUB_AGENT_TOOL,
    SUB_AGENT_TOOLS,
    sub_agent_prompt,
)
from oracle_plugins.firecrawl._untrusted import (
    UNTRUSTED_TAG,
    UntrustedAnswerMiddleware,
    mark_untrusted,
)

__version__ = "0.1.0"

plugin = FirecrawlPlugin()
"""The instance the ``oracle.plugins`` entry point ``firecrawl`` names (default options)."""

__all__ = [
    "MANIFEST",
    "SCRAPE_TOOL",
    "SEARCH_TOOL",
    "SUB_AGENT_DESCRIPTION",
    "SUB_AGENT_NAME",
    "SUB_AGENT_TOOL",
    "SUB_AGENT_TOOLS",
    "UNTRUSTED_TAG",
    "FirecrawlConfig",
    "FirecrawlPlugin",
    "UntrustedAnswerMiddleware",
    "mark_untrusted",
    "plugin",
    "sub_agent_prompt",
    "wants_firecrawl",
]
