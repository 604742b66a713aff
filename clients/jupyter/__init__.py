"""tether in a notebook: `%load_ext tether.jupyter`, then `%%tether` above a question.

The extension is a thin client of the workspace's daemon (the git root above the kernel's
current directory), on the blocking client (`tether.clients.core.rpc`): it brings no async
framework into the kernel. See docs/jupyter.md for the magics and `actions`, `follow` for
what they do.
"""

from typing import Any


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext tether.jupyter`: register `%tether` and `%%tether`."""
    from tether.jupyter.magics import register

    register(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """Nothing to undo: the magics hold no connection between cells."""
