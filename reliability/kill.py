"""Kill: SIGKILL the oracle mid-stream again and again, restart it, check what survived.

Each round starts a few streamed turns in new sessions (every other one calls the slow
tool, and the model streams slowly, so a kill lands in a model call, a tool call or a
checkpoint write), kills the server at a random moment, and starts it again on the same
data directory and Redis. Then:

- every turn whose ``done`` said ``finished`` before the kill (acknowledged) must be in
  its session's history, question and answer;
- every run cut off by the kill must end, on rejoin from its last frame, with a terminal
  frame (``done``);
- at the end, every SQLite file of the oracle must pass ``PRAGMA integrity_check``.

With ``matrix=True`` the oracle runs the IXO backend against a real Synapse, with
``did:ixo`` users and each user's file backed up to Matrix after every turn
(``MATRIX_BACKUP_DEBOUNCE_SECONDS=0``), so kills land in uploads too; each restart waits
until the Matrix layer is loaded again.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from oracle_server.testing import (
    BlocksyncDouble,
    ChatRequest,
    OpenAIDouble,
    Step,
    Synapse,
    ToolCalls,
    auth_headers,
    node_env,
    provision_oracle,
    user_headers,
    wait_ready,
)
from oracle_ucan import Ed25519Signer
from reliability._process import OracleProcess
from reliability._sse import sse_events

__all__ = ["KillFigures", "kill_runs"]

STREAMS_PER_ROUND = 3


@dataclass
class KillFigures:
    """What a kill run found."""

    kills: int = 0
    mid_stream: int = 0
    acknowledged: int = 0
    lost: list[str] = field(default_factory=list)
    interrupted: int = 0
    unterminated: list[str] = field(default_factory=list)
    databases: int = 0
    corrupt: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """No acknowledged turn lost, every run terminated, no corrupt database."""
        return not (self.lost or self.unterminated or self.corrupt)

    def report(self) -> str:
        """The figures as text."""
        return "\n".join(
            [
                f"kill: {self.kills} SIGKILLs, each followed by a restart; "
                f"{self.mid_stream} cut a stream short",
                f"  acknowledged turns: {self.acknowledged}, lost: {len(self.lost)}",
                f"  runs cut off: {self.interrupted}, without a terminal frame on rejoin: "
                f"{len(self.unterminated)}",
                f"  SQLite files checked: {self.databases}, corrupt: {len(self.corrupt)}",
            ]
        )


KILL_WINDOW_SPAN = 1.1
"""Each kill lands at a random moment within this many times the longest turn of a
round run to its end first (a calibration round outside the figures): so the kills span
a whole turn, from before the first token to after the quickest turns have finished, on a
slow machine and a fast one alike. A fixed window either cut every turn short or landed
after all of them."""


def _reply(chat: ChatRequest) -> Step:
    last = chat.messages[-1]
    if last.get("role") == "tool":
        return "The lookup found what you asked about, in some detail."
    text = str(last.get("content", ""))
    if text.endswith("with a lookup"):
        return ToolCalls([("slow_lookup", {"topic": text})])
    return f"Answer to: {text}. " + "Some more words to stream slowly. " * 3


class _Headers:
    """Auth headers of user ``i``, minted anew at each use (a run outlives a token)."""

    def __init__(
        self, users: list[Ed25519Signer], mint: Callable[[Ed25519Signer], dict[str, str]]
    ) -> None:
        self._users = users
        self._mint = mint

    def __getitem__(self, index: int) -> dict[str, str]:
        return self._mint(self._users[index])


@dataclass
class _Setup:
    """The oracle's environment and its users, local or against a homeserver."""

    env: dict[str, str]
    headers: _Headers
    ready: Callable[[str], Awaitable[Any]] | None = None


@contextlib.asynccontextmanager
async def _local(data: Path, llm: OpenAIDouble) -> AsyncIterator[_Setup]:
    env = {"ORACLE_BACKEND": "local", "SQLITE_DATABASE_PATH": str(data), **llm.env()}
    users = [Ed25519Signer.generate() for _ in range(STREAMS_PER_ROUND)]
    # The local oracle's DID is its development key's, made on its first start.
    key_file = data / "oracle-dev-key.txt"

    def mint(user: Ed25519Signer) -> dict[str, str]:
        oracle_did = Ed25519Signer.parse(key_file.read_text().strip()).did()
        return auth_headers(user, oracle_did)

    yield _Setup(env, _Headers(users, mint))


@contextlib.asynccontextmanager
async def _matrix(data: Path, llm: OpenAIDouble) -> AsyncIterator[_Setup]:
    with Synapse(data_dir=data.parent / "synapse") as synapse:
        account = await provision_oracle(synapse)
        async with BlocksyncDouble() as blocksync:
            env = node_env(
                synapse, account, data.parent, llm=llm, blocksync=blocksync,
                MATRIX_BACKUP_DEBOUNCE_SECONDS="0",
            )  # fmt: skip
            users = [blocksync.add_user(Ed25519Signer.generate()) for _ in range(STREAMS_PER_ROUND)]
            yield _Setup(env, _Headers(users, user_headers), ready=wait_ready)


@dataclass
class _Stream:
    session_id: str
    text: str
    run_id: str = ""
    last_seq: int = 0
    status: str = ""
    took: float = 0.0


async def _stream(client: httpx.AsyncClient, headers: dict[str, str], stream: _Stream) -> None:
    body = {"message": stream.text, "stream": True}
    sent = time.monotonic()
    with contextlib.suppress(httpx.HTTPError):
        async with client.stream(
            "POST", f"/messages/{stream.session_id}", headers=headers, json=body
        ) as response:
            stream.run_id = response.headers.get("x-run-id", "")
            async for frame in sse_events(response):
                stream.last_seq = frame.id or stream.last_seq
                if frame.event == "done":
                    stream.status = str(frame.data["status"])
                    stream.took = time.monotonic() - sent


async def _round(
    client: httpx.AsyncClient, headers: _Headers, name: str, number: int
) -> tuple[list[_Stream], list[asyncio.Task[None]]]:
    """A round's streamed turns, started: one per user, every other one with the tool."""
    # New sessions each round: a killed server's turn locks stay held in Redis until
    # their lease runs out (30 s), as after any crash.
    sessions = [
        (await client.post("/sessions", headers=headers[i])).json()["sessionId"]
        for i in range(STREAMS_PER_ROUND)
    ]
    streams = [
        _Stream(sessions[i], f"{name} {number} of user {i}"
                + (" with a lookup" if (number + i) % 2 else ""))
        for i in range(STREAMS_PER_ROUND)
    ]  # fmt: skip
    tasks = [asyncio.create_task(_stream(client, headers[i], s)) for i, s in enumerate(streams)]
    return streams, tasks


async def _rejoined_to_the_end(
    client: httpx.AsyncClient, headers: dict[str, str], stream: _Stream
) -> bool:
    """Whether the run's rejoin from its last frame ends with ``done``."""
    path = f"/runs/{stream.run_id}"
    async with client.stream("GET", path, headers=headers, params={"after": stream.last_seq}) as r:
        if r.status_code != 200:
            return False
        events = [frame.event async for frame in sse_events(r)]
    return bool(events) and events[-1] == "done"


def _integrity(data: Path, figures: KillFigures) -> None:
    for path in sorted(data.rglob("*.db")):
        figures.databases += 1
        try:
            with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
                rows = conn.execute("PRAGMA integrity_check").fetchall()
        except sqlite3.Error as exc:
            figures.corrupt.append(f"{path.name}: {exc}")
            continue
        if rows != [("ok",)]:
            figures.corrupt.append(f"{path.name}: {rows[:3]}")


async def kill_runs(
    kills: int,
    *,
    redis_url: str,
    matrix: bool = False,
    seed: int = 0,
    work_dir: Path | None = None,
) -> KillFigures:
    """Kill the oracle ``kills`` times mid-stream; see the module docstring.

    Args:
        kills: How many rounds, one SIGKILL each.
        redis_url: The Redis of the run log, which outlives each killed server.
        matrix: Run the IXO backend against a real Synapse, backing up every turn.
        seed: Seeds the kill moments, so a failing run can be replayed.
        work_dir: Where the oracle's files go (a temporary directory inside it).
    """
    figures = KillFigures()
    chance = random.Random(seed)
    with tempfile.TemporaryDirectory(dir=work_dir) as scratch:
        data = Path(scratch) / "data"
        model = OpenAIDouble(auto_reply=_reply, chunk_size=4, delay_between_chunks=0.01)
        async with model as llm, (_matrix if matrix else _local)(data, llm) as setup:
            oracle = OracleProcess(
                {
                    **setup.env,
                    "REDIS_URL": redis_url,
                    "RUN_REPLICA_TIMEOUT_SECONDS": "1",
                    "THROTTLE_LIMIT": "10000000",
                    "RELIABILITY_TOOL_SECONDS": "0.3",
                },
                log=Path(scratch) / "server.log",
            )

            async def start() -> None:
                await oracle.start()
                if setup.ready is not None:
                    await asyncio.wait_for(setup.ready(oracle.base_url), 60)
                # One turn first, outside the figures: a fresh process pays its one-off
                # costs (imports, the tokenizer's vocabulary) on its first turn, and kills
                # should land in turns, not in those.
                async with httpx.AsyncClient(base_url=oracle.base_url, timeout=60) as warm:
                    session = (await warm.post("/sessions", headers=setup.headers[0])).json()
                    await warm.post(
                        f"/messages/{session['sessionId']}",
                        headers=setup.headers[0],
                        json={"message": "warm up"},
                    )

            await start()
            headers = setup.headers
            acknowledged: list[tuple[int, _Stream]] = []
            timeout = httpx.Timeout(30, connect=10)
            async with httpx.AsyncClient(base_url=oracle.base_url, timeout=timeout) as client:
                calibration, tasks = await _round(client, headers, "calibration", 1)
                await asyncio.gather(*tasks)
                longest = max(stream.took for stream in calibration)
                if longest <= 0:
                    raise RuntimeError("reliability.calibration_failed: no turn finished")
                window = KILL_WINDOW_SPAN * longest
                for round_number in range(kills):
                    streams, tasks = await _round(client, headers, "round", round_number)
                    await asyncio.sleep(chance.uniform(0.05, window))
                    await oracle.kill()
                    figures.kills += 1
                    await asyncio.gather(*tasks)
                    await start()
                    cut = False
                    for i, stream in enumerate(streams):
                        if stream.status == "finished":
                            acknowledged.append((i, stream))
                        elif stream.run_id:
                            cut = True
                            figures.interrupted += 1
                            if not await _rejoined_to_the_end(client, headers[i], stream):
                                figures.unterminated.append(stream.run_id)
                    figures.mid_stream += cut
                figures.acknowledged = len(acknowledged)
                for i, stream in acknowledged:
                    history = await client.get(f"/messages/{stream.session_id}", headers=headers[i])
                    contents = [m.get("content") for m in history.json().get("messages", [])]
                    if stream.text not in contents:
                        figures.lost.append(stream.text)
            await oracle.stop()
            _integrity(Path(setup.env["SQLITE_DATABASE_PATH"]), figures)
    return figures
