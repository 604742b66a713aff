"""Hooks: the user's commands run at tool calls, turn ends and session starts.

`events` is the JSON a hook reads on stdin; `run` starts one hook as a process the daemon
owns and waits for it within its timeout; `turn` decides which hooks a moment calls for, runs
them, and turns what they answer into a denial, an addition to a tool's result or a notice.
What a hook is configured with is `tether.daemon.config.hooks`.
"""
