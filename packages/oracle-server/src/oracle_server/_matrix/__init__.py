"""Matrix layer of the oracle server: backups of per-user SQLite files to a homeserver."""
