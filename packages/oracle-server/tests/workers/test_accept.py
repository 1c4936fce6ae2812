"""The workers' load board: who holds how many connections, and who should step aside."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from oracle_server._workers.accept import LoadBoard


@pytest.fixture
def board() -> Iterator[LoadBoard]:
    made = LoadBoard.create(3)
    yield made
    made.close()


def test_a_new_board_has_no_worker_accepting(board: LoadBoard) -> None:
    assert board.counts() == [-1, -1, -1]
    assert len(board) == 3
    board.hold(0, 5)
    assert not board.ahead(0)  # alone, a worker never defers


def test_a_worker_steps_aside_beyond_one_more_than_the_least_busy_other(
    board: LoadBoard,
) -> None:
    board.hold(0, 3)
    board.hold(1, 2)
    board.hold(2, 1)
    assert board.ahead(0)  # 3 against 1
    assert not board.ahead(1)  # 2 against 1: within the slack
    assert not board.ahead(2)


def test_a_worker_that_stopped_accepting_is_not_waited_for(board: LoadBoard) -> None:
    board.hold(0, 4)
    board.hold(1, 0)
    assert board.ahead(0)
    board.absent(1)  # stopping, or dead: the supervisor marks it
    assert not board.ahead(0)
    assert board.counts() == [4, -1, -1]


def test_a_child_process_writes_the_memory_its_parent_reads(board: LoadBoard) -> None:
    fd = board.fileno()
    script = (
        "import sys\n"
        "from oracle_server._workers.accept import LoadBoard\n"
        "board = LoadBoard.attach(int(sys.argv[1]))\n"
        "assert board.counts() == [7, -1, -1], board.counts()\n"
        "board.hold(2, 9)\n"
    )
    board.hold(0, 7)
    subprocess.run([sys.executable, "-c", script, str(fd)], pass_fds=(fd,), check=True)
    assert board.counts() == [7, -1, 9]
    assert board.ahead(2)


def test_closing_twice_is_harmless() -> None:
    made = LoadBoard.create(1)
    made.close()
    made.close()
    assert made.fileno() == -1
