"""Jobs that run spark-eventbus without writing code (spark-submit or ``python -m``), using
the package as users do.

May import: options, the package root.
"""
