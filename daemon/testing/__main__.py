"""``python -m tether.testing --script FILE``: the scripted model server from the command line."""

from tether.testing.server import main

raise SystemExit(main())
