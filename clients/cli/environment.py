"""The environment a turn's commands run in, in words (`tether daemon status`, `run -v`)."""

from tether.clients.core.text import visible
from tether.protocol.events import TurnEnvironment


def environment_words(environment: TurnEnvironment) -> str:
    """`its client's environment (VIRTUAL_ENV=…, PATH starts …)`, or the daemon's."""
    whose = "its client's" if environment.source == "client" else "the daemon's"
    found = [
        f"{name}={visible(value)}"
        for name, value in (
            ("VIRTUAL_ENV", environment.virtual_env),
            ("CONDA_PREFIX", environment.conda_prefix),
        )
        if value
    ]
    first = environment.path.split(":", 1)[0]
    found.append(f"PATH starts {visible(first)}" if first else "no PATH")
    return f"{whose} environment ({', '.join(found)})"
