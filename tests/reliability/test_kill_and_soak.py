"""Short versions of the kill and soak runs (``make chaos`` and ``make soak`` run them long).

The oracle runs in a process of its own; its figures are printed (``pytest -s`` shows them).
"""

from __future__ import annotations

from pathlib import Path

from reliability.kill import kill_runs
from reliability.soak import soak

from oracle_server.testing import redis_url_or_skip


async def test_killed_mid_stream_five_times_nothing_acknowledged_is_lost(tmp_path: Path) -> None:
    figures = await kill_runs(5, redis_url=redis_url_or_skip(), seed=13, work_dir=tmp_path)
    print(figures.report())

    assert figures.kills == 5
    assert figures.interrupted > 0  # the kills did land mid-stream
    assert figures.acknowledged > 0  # and after some turns had finished
    assert figures.lost == []
    assert figures.unterminated == []
    assert figures.databases > 0
    assert figures.corrupt == []


async def test_a_minute_of_concurrent_sse_sessions_without_an_error(tmp_path: Path) -> None:
    figures = await soak(100, 60, work_dir=tmp_path)
    print(figures.report())

    assert figures.turns > figures.sessions  # every session got past its first turn
    assert not figures.errors
    assert abs(figures.drift(figures.files)) <= 0.10
    assert max(n for _, n in figures.sockets) <= figures.socket_bound
