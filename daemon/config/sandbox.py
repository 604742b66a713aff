"""The command sandbox as the user's settings describe it, for one workspace.

The settings (`sandbox`, `sandbox_network`, `sandbox_bwrap`, `sandbox_writable`) come from the
user's own config file only: a workspace's `.tether/config.toml` that sets them has them
ignored, with a notice (`tether.daemon.config.settings.load_workspace_rules`), so a cloned
repository can neither turn the sandbox off nor the network on.
"""

from pathlib import Path

from tether.daemon.config import paths
from tether.daemon.config.settings import Config, config_file
from tether.daemon.procs.sandbox import Sandbox


def command_sandbox(config: Config, workspace: Path) -> Sandbox | None:
    """The sandbox commands run in under `config` (None: the sandbox is off). tether's own
    folders stay read-only even in a workspace that holds them; the runtime dir, whose
    discovery files hold the daemon's token, is hidden."""
    if config.sandbox == "off":
        return None
    return Sandbox(
        workspace=workspace.resolve(),
        program=config.sandbox_bwrap,
        network=config.sandbox_network,
        writable=tuple(Path(folder).expanduser().resolve() for folder in config.sandbox_writable),
        kept=(paths.config_dir(), paths.data_dir(), paths.state_dir()),
        hidden=(paths.runtime_dir(),),
        config_file=str(config_file()),
    )
