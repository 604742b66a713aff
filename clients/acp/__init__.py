"""`tether acp`: the Agent Client Protocol agent (`agent`), its stdio JSON-RPC (`peer`), the
params it reads (`params`), and how tether's events read as ACP updates (`updates`, `diffs`).
See docs/acp.md."""
