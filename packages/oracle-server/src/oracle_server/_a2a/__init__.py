"""The oracle as an Agent2Agent agent (``ORACLE_A2A``)."""
