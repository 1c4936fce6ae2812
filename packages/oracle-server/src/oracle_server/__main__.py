"""``python -m oracle_server``: the ``oracle`` command."""

from oracle_server._cli import main

main()
