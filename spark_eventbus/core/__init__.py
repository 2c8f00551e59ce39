"""The connector's pure model: stream IDs, keys, connection specs, offsets, positions, losses,
claim planning, retention's bound, server capabilities, RESP packing, the Python workers' GC.
No I/O, no Spark, no redis-py: runs anywhere.

May import: nothing.
"""
