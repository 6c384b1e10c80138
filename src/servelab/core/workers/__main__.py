"""``python -m servelab.core.workers FD PARENT_PID ARENA_BYTES``: the worker program (see ``_child``)."""

import sys

from servelab.core.workers._child import main

sys.exit(main())
