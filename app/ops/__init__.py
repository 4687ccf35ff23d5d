"""Operating a running server: the graceful drain on SIGTERM (drain.py, server.py) and
online backups with their restore (backup.py, restore.py)."""
