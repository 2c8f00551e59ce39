"""The operator's tools: the ``eventbus`` CLI, the least-privilege ACL rules, the zip for
``spark-submit --py-files``.

May import: core, options, redisio.
"""
