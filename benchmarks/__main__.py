"""``python -m benchmarks``: run every benchmark and print its figures."""

from __future__ import annotations

import asyncio

from benchmarks import boot_time, first_turn_tokens, turn_overhead, ucan_validation


def main() -> None:
    """Run the benchmarks one after another."""
    print(first_turn_tokens.report(asyncio.run(first_turn_tokens.measure())))
    print()
    print(boot_time.report(boot_time.measure()))
    print()
    print(turn_overhead.report(asyncio.run(turn_overhead.measure())))
    print()
    print(ucan_validation.report(asyncio.run(ucan_validation.measure())))


if __name__ == "__main__":
    main()
