"""The daemon's structured log: JSON lines per workspace, owner-only, rotated by size, with the
connection, session and turn ids of the task that writes each line, and secrets masked
(see docs/logs.md)."""
