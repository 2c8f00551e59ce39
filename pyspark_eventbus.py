"""Auto-registration hook: Spark imports modules named ``pyspark_*`` and registers their
``DefaultSource``, so ``format("eventbus")`` works after ``pip install`` with no code."""

from spark_eventbus.source import EventBusDataSource as DefaultSource

__all__ = ["DefaultSource"]
