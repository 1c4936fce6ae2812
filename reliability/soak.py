"""Soak: many concurrent SSE sessions for minutes; errors, memory and descriptors.

Each session is a user of its own who sends turns back to back, streamed, and reads every
frame to ``done``; every fourth turn calls the slow tool first. The oracle runs in a
process of its own (``OracleProcess``), so its resident memory and open descriptors are
read from ``/proc`` every few seconds. A run passes with no error and, after warm-up (the
first quarter of the run), both figures flat: the mean of the last third of the samples
within ``tolerance`` of the mean of the first third.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from oracle_server.testing import ChatRequest, OpenAIDouble, Step, ToolCalls, auth_headers
from oracle_ucan import Ed25519Signer
from reliability._process import OracleProcess

__all__ = ["SoakFigures", "soak"]

SAMPLE_SECONDS = 2.0


@dataclass
class SoakFigures:
    """What a soak run measured."""

    sessions: int
    seconds: float
    turns: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    rss: list[tuple[float, int]] = field(default_factory=list)
    fds: list[tuple[float, int]] = field(default_factory=list)

    @property
    def turns_per_second(self) -> float:
        """Finished turns per second of the run."""
        return self.turns / self.seconds if self.seconds else 0.0

    def drift(self, samples: list[tuple[float, int]]) -> float:
        """The mean of the last third of the samples after warm-up over that of the
        first third, minus one (``0.05`` = 5% more)."""
        warm = [value for at, value in samples if at >= self.seconds / 4]
        if len(warm) < 3:
            return 0.0
        third = max(1, len(warm) // 3)
        return statistics.mean(warm[-third:]) / statistics.mean(warm[:third]) - 1

    def flat(self, tolerance: float = 0.10) -> bool:
        """Whether memory and descriptors stayed within ``tolerance`` after warm-up."""
        return abs(self.drift(self.rss)) <= tolerance and abs(self.drift(self.fds)) <= tolerance

    def report(self) -> str:
        """The figures as text."""
        mib = 1024 * 1024
        rss = [value for _, value in self.rss]
        fds = [value for _, value in self.fds]
        lines = [
            f"soak: {self.sessions} concurrent SSE sessions for {self.seconds:.0f} s",
            f"  turns finished: {self.turns} ({self.turns_per_second:.1f}/s)",
            f"  errors: {sum(self.errors.values())}"
            + (f" {dict(self.errors)}" if self.errors else ""),
        ]
        if rss:
            lines.append(
                f"  server RSS: min {min(rss) / mib:.0f} MiB, max {max(rss) / mib:.0f} MiB, "
                f"drift after warm-up {self.drift(self.rss):+.1%}"
            )
        if fds:
            lines.append(
                f"  server fds: min {min(fds)}, max {max(fds)}, "
                f"drift after warm-up {self.drift(self.fds):+.1%}"
            )
        return "\n".join(lines)


def _reply(chat: ChatRequest) -> Step:
    if chat.messages[-1].get("role") == "tool":
        return "Here is what the lookup found."
    if sum(1 for m in chat.messages if m.get("role") == "user") % 4 == 0:
        return ToolCalls([("slow_lookup", {"topic": "tides"})])
    return "A short answer."


async def _session(
    client: httpx.AsyncClient, oracle_did: str, figures: SoakFigures, until: float
) -> None:
    user = Ed25519Signer.generate()
    created = await client.post("/sessions", headers=auth_headers(user, oracle_did))
    if created.status_code != 201:
        figures.errors[f"create {created.status_code}"] += 1
        return
    session_id = created.json()["sessionId"]
    body = {"message": "How are the tides today?", "stream": True}
    while time.monotonic() < until:
        try:
            # A fresh token per turn: a run outlives UCAN_AUTH_MAX_TTL_SECONDS.
            headers = auth_headers(user, oracle_did)
            status = await _turn(client, f"/messages/{session_id}", headers, body)
        except httpx.HTTPError as exc:
            figures.errors[type(exc).__name__] += 1
            continue
        if status == "finished":
            figures.turns += 1
        else:
            figures.errors[status] += 1


async def _turn(
    client: httpx.AsyncClient, path: str, headers: dict[str, str], body: dict[str, object]
) -> str:
    async with client.stream("POST", path, headers=headers, json=body) as response:
        if response.status_code != 200:
            return f"HTTP {response.status_code}"
        done: dict[str, object] | None = None
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: ") and event in ("done", "error"):
                data = json.loads(line.removeprefix("data: "))
                if event == "error":
                    return f"error frame {data.get('code', '')}".strip()
                done = data
    return str(done.get("status")) if done else "no done frame"


async def _sample(oracle: OracleProcess, figures: SoakFigures, started: float) -> None:
    while True:
        at = time.monotonic() - started
        with contextlib.suppress(OSError, StopIteration):
            figures.rss.append((at, oracle.rss_bytes()))
            figures.fds.append((at, oracle.open_fds()))
        await asyncio.sleep(SAMPLE_SECONDS)


async def soak(sessions: int, seconds: float, *, work_dir: Path | None = None) -> SoakFigures:
    """Run ``sessions`` concurrent sessions against a fresh oracle for ``seconds``."""
    figures = SoakFigures(sessions=sessions, seconds=seconds)
    with tempfile.TemporaryDirectory(dir=work_dir) as scratch:
        root = Path(scratch)
        async with OpenAIDouble(auto_reply=_reply, keep_requests=100) as llm:
            oracle = OracleProcess(
                {
                    "ORACLE_BACKEND": "local",
                    "SQLITE_DATABASE_PATH": str(root / "data"),
                    "THROTTLE_LIMIT": "10000000",
                    **llm.env(),
                },
                log=root / "server.log",
            )
            await oracle.start()
            try:
                limits = httpx.Limits(max_connections=sessions + 8, keepalive_expiry=2)
                timeout = httpx.Timeout(max(120.0, seconds), connect=30)
                async with httpx.AsyncClient(
                    base_url=oracle.base_url, limits=limits, timeout=timeout
                ) as client:
                    oracle_did = _dev_oracle_did(root / "data")
                    started = time.monotonic()
                    sampler = asyncio.create_task(_sample(oracle, figures, started))
                    until = started + seconds
                    await asyncio.gather(
                        *(_session(client, oracle_did, figures, until) for _ in range(sessions))
                    )
                    sampler.cancel()
                    await asyncio.gather(sampler, return_exceptions=True)
                    figures.seconds = time.monotonic() - started
            finally:
                await oracle.stop()
    return figures


def _dev_oracle_did(data: Path) -> str:
    """The local oracle's DID, from the development key it wrote on first start."""
    key = (data / "oracle-dev-key.txt").read_text().strip()
    return Ed25519Signer.parse(key).did()
