"""Soak: many concurrent SSE sessions for minutes; errors, memory and descriptors.

Each session is a user of its own who sends turns back to back, streamed, and reads every
frame to ``done``; every fourth turn calls the slow tool first. The sessions arrive spread
over the first tenth of the run, not all in one millisecond; a stream that drops is
rejoined as the JavaScript client does, and counted. So the load is past what
one replica serves: turns wait ``queued`` (``TURN_CONCURRENCY``, at its default) with
their streams open, and the run shows that a saturated server slows down evenly instead
of failing. The oracle runs in a process of its own (``OracleProcess``), so its resident
memory and open descriptors are read from ``/proc`` every few seconds while the load
lasts (not while the last turns drain). A run passes with no error and, after warm-up
(the first quarter of the run, at least 30 s), memory and the descriptors other than
sockets flat: the mean of the last third of the samples within ``tolerance`` of the mean
of the first third. Sockets are not flat under load, and need not be: the model client
opens one per running turn and closes idle ones after a few seconds, so their count
swings by a third between samples on a busy machine. They pass when they stay within
``socket_bound`` (the sessions' own connections plus the model pool); a socket leaked per
turn passes that bound within seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from reliability._sse import sse_events

__all__ = ["SoakFigures", "soak"]

SAMPLE_SECONDS = 2.0
MODEL_POOL = 100
"""Idle connections the model client keeps (the OpenAI SDK's keep-alive pool)."""
TURN_CONCURRENCY = 64
"""Turns running at once (the server's default), each with a model connection of its own."""
LISTENERS = 16
"""The server's listening sockets and its connections to its own stores, with room."""
WARM_UP_MIN_SECONDS = 30.0
"""The warm-up is at least this long: the server's connection pools (the sessions' own
connections, and those to the model, which grow while turns queue) and the users'
databases reach their working size in about this time on a loaded machine, whatever the
run's length. A short run with a quarter for warm-up measured that growth as drift."""


@dataclass
class SoakFigures:
    """What a soak run measured."""

    sessions: int
    seconds: float
    turns: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    rejoins: int = 0
    elapsed: float = 0.0
    rss: list[tuple[float, int]] = field(default_factory=list)
    fds: list[tuple[float, int]] = field(default_factory=list)
    sockets: list[tuple[float, int]] = field(default_factory=list)

    @property
    def files(self) -> list[tuple[float, int]]:
        """The descriptors other than sockets (databases, logs, pipes), per sample."""
        return [(at, total - s) for (at, total), (_, s) in zip(self.fds, self.sockets, strict=True)]

    @property
    def socket_bound(self) -> int:
        """The most sockets a healthy server holds under this load: one per session, and
        the model client's pool (up to ``MODEL_POOL`` idle, one more per running turn)."""
        return self.sessions + MODEL_POOL + TURN_CONCURRENCY + LISTENERS

    @property
    def turns_per_second(self) -> float:
        """Finished turns per second, the drain of the last turns included."""
        elapsed = self.elapsed or self.seconds
        return self.turns / elapsed if elapsed else 0.0

    def drift(self, samples: list[tuple[float, int]]) -> float:
        """The mean of the last third of the samples after warm-up (a quarter of the run,
        at least ``WARM_UP_MIN_SECONDS``) over that of the first third, minus one
        (``0.05`` = 5% more)."""
        start = max(self.seconds / 4, min(WARM_UP_MIN_SECONDS, self.seconds / 2))
        warm = [value for at, value in samples if at >= start]
        if len(warm) < 3:
            return 0.0
        third = max(1, len(warm) // 3)
        return statistics.mean(warm[-third:]) / statistics.mean(warm[:third]) - 1

    def flat(self, tolerance: float = 0.10) -> bool:
        """Whether memory and the descriptors other than sockets stayed within
        ``tolerance`` after warm-up, and the sockets within ``socket_bound``."""
        return (
            abs(self.drift(self.rss)) <= tolerance
            and abs(self.drift(self.files)) <= tolerance
            and max((n for _, n in self.sockets), default=0) <= self.socket_bound
        )

    def report(self) -> str:
        """The figures as text."""
        mib = 1024 * 1024
        rss = [value for _, value in self.rss]
        fds = [value for _, value in self.fds]
        lines = [
            f"soak: {self.sessions} concurrent SSE sessions for {self.seconds:.0f} s",
            f"  turns finished: {self.turns} ({self.turns_per_second:.1f}/s; "
            f"the last drained {max(0.0, self.elapsed - self.seconds):.0f} s after the load)",
            f"  errors: {sum(self.errors.values())}"
            + (f" {dict(self.errors)}" if self.errors else ""),
            f"  streams dropped and rejoined to their end: {self.rejoins}",
        ]
        if self.latencies:
            ordered = sorted(self.latencies)
            lines.append(
                f"  turn time: median {statistics.median(ordered):.1f} s, "
                f"p95 {ordered[int(0.95 * (len(ordered) - 1))]:.1f} s, max {ordered[-1]:.1f} s"
            )
        if rss:
            lines.append(
                f"  server RSS: min {min(rss) / mib:.0f} MiB, max {max(rss) / mib:.0f} MiB, "
                f"drift after warm-up {self.drift(self.rss):+.1%}"
            )
        if fds:
            files = [value for _, value in self.files]
            sockets = [value for _, value in self.sockets]
            lines.append(
                f"  server fds: min {min(fds)}, max {max(fds)}; other than sockets "
                f"{min(files)}..{max(files)}, drift after warm-up {self.drift(self.files):+.1%}; "
                f"sockets {min(sockets)}..{max(sockets)} (bound {self.socket_bound})"
            )
        return "\n".join(lines)


def _reply(chat: ChatRequest) -> Step:
    if chat.messages[-1].get("role") == "tool":
        return "Here is what the lookup found."
    if sum(1 for m in chat.messages if m.get("role") == "user") % 4 == 0:
        return ToolCalls([("slow_lookup", {"topic": "tides"})])
    return "A short answer."


async def _session(
    client: httpx.AsyncClient, oracle_did: str, figures: SoakFigures, until: float, delay: float
) -> None:
    await asyncio.sleep(delay)
    user = Ed25519Signer.generate()
    created = await client.post("/sessions", headers=auth_headers(user, oracle_did))
    if created.status_code != 201:
        figures.errors[f"create {created.status_code}"] += 1
        return
    session_id = created.json()["sessionId"]
    body = {"message": "How are the tides today?", "stream": True}
    while time.monotonic() < until:
        sent = time.monotonic()
        try:
            status = await _turn(client, session_id, user, oracle_did, body, figures)
        except httpx.HTTPError as exc:
            figures.errors[type(exc).__name__] += 1
            continue
        if status == "finished":
            figures.turns += 1
            figures.latencies.append(time.monotonic() - sent)
        else:
            figures.errors[status] += 1


@dataclass
class _Run:
    """What a turn's frames said so far."""

    run_id: str | None = None
    last_id: int = 0
    outcome: str | None = None


REJOINS = 3
"""How often a turn whose stream drops is rejoined before the drop counts as an error."""


async def _turn(
    client: httpx.AsyncClient,
    session_id: str,
    user: Ed25519Signer,
    oracle_did: str,
    body: dict[str, object],
    figures: SoakFigures,
) -> str:
    """One streamed turn to its end: ``finished``, or what went wrong.

    As the JavaScript client does, a stream that drops after its ``run`` frame is rejoined
    (``GET /runs/{id}?after=<last frame>``); each rejoin is counted in the figures.
    """
    run = _Run()
    # A fresh token per request: a run outlives UCAN_AUTH_MAX_TTL_SECONDS.
    request = client.stream(
        "POST", f"/messages/{session_id}", headers=auth_headers(user, oracle_did), json=body
    )
    for attempt in range(REJOINS + 1):
        try:
            async with request as response:
                if response.status_code != 200:
                    return f"HTTP {response.status_code}" + (" on rejoin" if attempt else "")
                await _read(response, run)
            break
        except httpx.TransportError:
            if run.run_id is None or attempt == REJOINS:
                raise
            figures.rejoins += 1
            request = client.stream(
                "GET",
                f"/runs/{run.run_id}",
                params={"after": run.last_id},
                headers=auth_headers(user, oracle_did),
            )
    return run.outcome or "no done frame"


async def _read(response: httpx.Response, run: _Run) -> None:
    async for frame in sse_events(response):
        run.last_id = frame.id or run.last_id
        if frame.event == "run":
            run.run_id = str(frame.data["runId"])
        elif frame.event == "error":
            run.outcome = f"error frame {frame.data.get('code', '')}".strip()
        elif frame.event == "done" and run.outcome is None:
            run.outcome = str(frame.data.get("status"))


async def _sample(
    oracle: OracleProcess, figures: SoakFigures, started: float, until: float
) -> None:
    while time.monotonic() < until:
        at = time.monotonic() - started
        with contextlib.suppress(OSError, StopIteration):
            rss = oracle.rss_bytes()
            fds, sockets = oracle.open_descriptors()
            figures.rss.append((at, rss))
            figures.fds.append((at, fds))
            figures.sockets.append((at, sockets))
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
                    until = started + seconds
                    sampler = asyncio.create_task(_sample(oracle, figures, started, until))
                    ramp = seconds / 10 / sessions
                    await asyncio.gather(
                        *(
                            _session(client, oracle_did, figures, until, n * ramp)
                            for n in range(sessions)
                        )
                    )
                    await sampler
                    figures.elapsed = time.monotonic() - started
            finally:
                await oracle.stop()
    return figures


def _dev_oracle_did(data: Path) -> str:
    """The local oracle's DID, from the development key it wrote on first start."""
    key = (data / "oracle-dev-key.txt").read_text().strip()
    return Ed25519Signer.parse(key).did()
