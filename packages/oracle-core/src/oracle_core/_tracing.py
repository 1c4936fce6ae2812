"""Keeps LangSmith's tracing wrappers cheap when tracing is off.

LangChain wraps every middleware ``wrap_*`` hook in LangSmith's ``traceable``, whose async
wrapper runs its bookkeeping in a worker thread twice per call, traced or not. With the
runtime's four framework middleware that is a dozen thread hops per turn, which cost more
than the rest of the turn's own work. LangSmith offers a public override for exactly this
(``set_runtime_overrides(aio_to_thread=...)``): when tracing is disabled the bookkeeping is
trivial, so it runs inline; when tracing is on, LangSmith's default path is kept.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

from oracle_core._langgraph_compat import langsmith_aio_to_thread_override

__all__ = ["install_untraced_fast_path"]


async def _inline_when_untraced(
    default: Callable[..., Any],
    ctx: contextvars.Context,
    func: Callable[..., Any],
    /,
    *args: Any,
    **kwargs: Any,
) -> Any:
    from langsmith.utils import tracing_is_enabled

    if ctx.run(tracing_is_enabled):
        return await default(ctx, func, *args, **kwargs)
    return ctx.run(func, *args, **kwargs)


def install_untraced_fast_path() -> bool:
    """Install the override unless the application installed its own; idempotent.

    Returns:
        Whether the runtime's override is active.

    Raises:
        ImportError: The installed LangSmith is outside the supported range and lacks
            the getter this reads the current override with.
    """
    import langsmith

    current = langsmith_aio_to_thread_override()
    if current is None:
        langsmith.set_runtime_overrides(aio_to_thread=_inline_when_untraced)
        return True
    return current is _inline_when_untraced
