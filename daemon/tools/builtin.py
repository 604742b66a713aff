"""The built-in tools, in the order the model sees them.

The one module that knows every tool; the registry takes whichever tools it is given.
"""

from tether.daemon.procs.groups import KILL_GRACE
from tether.daemon.skills.library import SkillLibrary
from tether.daemon.tools.base import Tool
from tether.daemon.tools.command_kill import CommandKill
from tether.daemon.tools.command_output import CommandOutput
from tether.daemon.tools.edit_file import EditFile
from tether.daemon.tools.find_definition import FindDefinition
from tether.daemon.tools.find_references import FindReferences
from tether.daemon.tools.glob import Glob
from tether.daemon.tools.grep import Grep
from tether.daemon.tools.hover import Hover
from tether.daemon.tools.list_dir import ListDir
from tether.daemon.tools.read_file import ReadFile
from tether.daemon.tools.rename_symbol import RenameSymbol
from tether.daemon.tools.run_command import RunCommand
from tether.daemon.tools.skill import SkillTool
from tether.daemon.tools.symbols import Symbols
from tether.daemon.tools.task import Task
from tether.daemon.tools.todo_write import TodoWrite
from tether.daemon.tools.write_file import WriteFile


def default_tools(*, kill_grace: float = KILL_GRACE) -> list[Tool]:
    """A fresh instance of every built-in tool. `kill_grace`: seconds a command's processes get
    between SIGTERM and SIGKILL."""
    return [
        ReadFile(),
        ListDir(),
        Glob(),
        Grep(),
        FindDefinition(),
        FindReferences(),
        Symbols(),
        Hover(),
        EditFile(),
        WriteFile(),
        RenameSymbol(),
        RunCommand(grace=kill_grace),
        CommandOutput(),
        CommandKill(),
        TodoWrite(),
        Task(),
    ]


def skill_tools(library: SkillLibrary) -> list[Tool]:
    """The tools offered after the built-in ones while `library` has skills (and only then, so
    that without skills the model sees exactly the built-in set)."""
    return [SkillTool(library)]
