"""Test harness: the Redis servers (single node, cluster, TLS), Spark Connect and standalone
clusters, and lean Python environments the tests start. Not tests themselves."""
