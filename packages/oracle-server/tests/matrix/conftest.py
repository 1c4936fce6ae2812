"""Fixtures of the Matrix layer tests.

The homeserver and what stands around it (`synapse`, `own_synapse`, `new_user`,
`oracle_account`, `blocksync`) come from ``oracle_server.testing.pytest_plugin``, which
the root conftest activates. Here: the model these tests talk to, which echoes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from oracle_server.testing import ChatRequest, OpenAIDouble


def echo(chat: ChatRequest) -> str:
    """The model's answer: the user's last message, echoed."""
    return f"Echo: {chat.last_user_text}"


@pytest.fixture
async def llm() -> AsyncIterator[OpenAIDouble]:
    """A model double that echoes the user (``Echo: <message>``) unless given steps."""
    async with OpenAIDouble(auto_reply=echo) as double:
        yield double
