"""Several worker processes on one machine: ``oracle serve --workers N``.

Layout: ``supervisor.py`` (binds the port, starts the workers, restarts one that dies),
``hub.py`` (what the workers share, held in the supervisor), ``connection.py`` (a
worker's end of the hub), ``wire.py`` (how messages cross). The backends that use the
hub sit beside the others of their concern: ``_turns/runlog/hub.py``,
``_turns/locks/hub.py``, ``_http/ratelimit/hub.py``, ``_replicas/hub.py`` and
``_socket/hubqueue.py``.
"""
