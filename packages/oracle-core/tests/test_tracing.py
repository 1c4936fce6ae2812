"""The untraced fast path: installed once, never over an application's own override."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from importlib.metadata import version
from typing import Any

import langsmith
import pytest

from oracle_core._langgraph_compat import SUPPORTED_RANGES, langsmith_aio_to_thread_override
from oracle_core._tracing import install_untraced_fast_path


@pytest.fixture(autouse=True)
def restore_langsmith_override() -> Iterator[None]:
    before = langsmith_aio_to_thread_override()
    yield
    langsmith.set_runtime_overrides(aio_to_thread=before)


def test_the_fast_path_is_installed_once() -> None:
    langsmith.set_runtime_overrides()

    assert install_untraced_fast_path() is True
    ours = langsmith_aio_to_thread_override()
    assert ours is not None
    assert install_untraced_fast_path() is True
    assert langsmith_aio_to_thread_override() is ours


def test_an_application_override_is_kept() -> None:
    async def own(default: Any, ctx: Any, func: Any, /, *args: Any, **kwargs: Any) -> Any:
        return await default(ctx, func, *args, **kwargs)

    langsmith.set_runtime_overrides(aio_to_thread=own)

    assert install_untraced_fast_path() is False
    assert langsmith_aio_to_thread_override() is own


def test_a_langsmith_without_the_getter_fails_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry makes the import fail, as if LangSmith no longer shipped the module.
    monkeypatch.setitem(sys.modules, "langsmith._runtime_overrides", None)

    with pytest.raises(ImportError, match="private_name_missing") as failed:
        install_untraced_fast_path()

    message = str(failed.value)
    assert f"langsmith {version('langsmith')} has no" in message
    assert "langsmith._runtime_overrides.get_runtime_overrides" in message
    assert f"supports langsmith{SUPPORTED_RANGES['langsmith']}" in message
