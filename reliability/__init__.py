"""Reliability runs of the oracle: kill, soak and the fault suite's helpers.

Each run serves a real oracle in a process of its own (so it can be killed and its
memory and descriptors read from ``/proc``) and drives it over HTTP and SSE with the
OpenAI-compatible double as its model. ``python -m reliability --help`` lists the runs;
``make soak`` and ``make chaos`` call them at full length, and ``tests/reliability`` runs
short versions inside ``make test``.
"""
