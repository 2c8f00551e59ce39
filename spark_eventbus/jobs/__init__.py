"""Jobs that run spark-eventbus without writing code (spark-submit or ``python -m``)."""
