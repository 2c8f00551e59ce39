"""``python -m spark_eventbus …``: the operator CLI (see :mod:`spark_eventbus.cli`)."""

import sys

from .cli import main

sys.exit(main())
