"""tether.clients.core: the Python client that every client of tether stands on (the terminal
client `tether.clients.cli`, the ACP agent, the notebook client `tether.jupyter`, the stdio
bridge): the blocking websocket, the JSON-RPC client and the one a terminal and a reader
thread share, finding and starting a workspace's daemon, reaching one over SSH, the untyped
first requests, and the plain-text pieces every client shows events with. It imports nothing
of the clients built on it.

Nothing is imported here: `tether run` reaches its first request through a few of these
modules, and a package that imported them all would slow every start.
"""
