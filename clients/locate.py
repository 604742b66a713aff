"""`python -P -m tether.clients.locate`, the name the TypeScript library and VS Code spawn;
the program is `tether.clients.core.locate`."""

from tether.clients.core.locate import main

if __name__ == "__main__":
    raise SystemExit(main())
