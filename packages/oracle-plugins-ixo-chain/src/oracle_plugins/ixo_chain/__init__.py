"""ixo-chain: read-only tools over public IXO chain data.

``get_account_balances`` reads bank balances from the chain's Cosmos REST gateway and
shows them through the chain's own denom metadata; ``chain_lookup`` reads claims,
collections, entities, DID documents, transactions and 1155 token balances from IXO
Blocksync in one GraphQL request. The plugin is ``on-demand`` and on unless
``IXO_CHAIN_TOOLS=off``.
"""

from oracle_plugins.ixo_chain._plugin import DEFAULT_REST_URLS, IxoChainConfig, IxoChainPlugin

__all__ = ["DEFAULT_REST_URLS", "IxoChainConfig", "IxoChainPlugin", "plugin"]

plugin = IxoChainPlugin()
"""The instance the ``oracle.plugins`` entry point ``ixo-chain`` names."""
