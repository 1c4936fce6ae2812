"""``python -m benchmarks``: run every benchmark and print its figures."""

from __future__ import annotations

import asyncio

from benchmarks import (
    backup_delta,
    boot_time,
    first_turn_tokens,
    history_growth,
    matrix_restore,
    mcp_tools,
    plugin_tokens,
    run_rejoin,
    sandbox_run,
    server_latency,
    server_throughput,
    turn_overhead,
    ucan_validation,
    versus_langgraph,
    workers_scaling,
)


def main() -> None:
    """Run the benchmarks one after another."""
    print(first_turn_tokens.report(asyncio.run(first_turn_tokens.measure())))
    print()
    print(plugin_tokens.report(asyncio.run(plugin_tokens.measure())))
    print()
    print(boot_time.report(boot_time.measure()))
    print()
    print(turn_overhead.report(asyncio.run(turn_overhead.measure())))
    print()
    print(ucan_validation.report(asyncio.run(ucan_validation.measure())))
    print()
    print(backup_delta.report(asyncio.run(backup_delta.measure())))
    print()
    print(server_throughput.report(asyncio.run(server_throughput.measure())))
    print()
    print(server_latency.report(asyncio.run(server_latency.measure())))
    print()
    print(history_growth.report(asyncio.run(history_growth.measure())))
    print()
    print(matrix_restore.report(asyncio.run(matrix_restore.measure())))
    print()
    print(run_rejoin.report(asyncio.run(run_rejoin.measure())))
    print()
    print(mcp_tools.report(asyncio.run(mcp_tools.measure())))
    print()
    print(sandbox_run.report(asyncio.run(sandbox_run.measure())))
    print()
    print(versus_langgraph.report(asyncio.run(versus_langgraph.measure())))
    # The same machine, both cores: the oracle's two workers against LangGraph's server.
    print(versus_langgraph.report(asyncio.run(versus_langgraph.measure(workers=2))))
    print()
    print(workers_scaling.report(asyncio.run(workers_scaling.measure())))
    # Few sessions: the load generator and the model double leave the cores to the server.
    print(workers_scaling.report(asyncio.run(workers_scaling.measure(sessions=4, turns=25))))


if __name__ == "__main__":
    main()
