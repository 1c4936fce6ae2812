"""A Domain Indexer double for offline tests of oracles that load this plugin.

`DomainIndexerDouble` serves the indexer's public routes on ``127.0.0.1`` from fixture JSON
(`load_fixtures()`), so the plugin talks to it over real HTTP:

```python
async with DomainIndexerDouble() as indexer:
    env = {"DOMAIN_INDEXER_URL": indexer.base_url, ...}
```

Needs the ``testing`` extra (``pip install "oracle-plugins-domain-indexer[testing]"``).
"""

try:
    from oracle_plugins.domain_indexer.testing._double import (
        ERROR_DID,
        FILTERS,
        DomainIndexerDouble,
        RecordedRequest,
        load_fixtures,
    )
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "oracle_plugins.domain_indexer.testing needs oracle-server; install it with "
        "pip install 'oracle-plugins-domain-indexer[testing]'"
    ) from exc

__all__ = ["ERROR_DID", "FILTERS", "DomainIndexerDouble", "RecordedRequest", "load_fixtures"]
