"""``python -m spark_eventbus …``: the operator CLI (see :mod:`spark_eventbus.ops.cli`)."""

import sys

from .ops.cli import main

sys.exit(main())
