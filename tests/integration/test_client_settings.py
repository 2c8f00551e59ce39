"""Options ``redis.*``: redis-py's own connection settings reach every client the connector
makes for the data nodes (reader, sink, AckingBatchWriter alike: they share the option table
and the client factory)."""

from __future__ import annotations

import pytest

from spark_eventbus import AckingBatchWriter
from spark_eventbus.options.reader import parse_reader_options
from spark_eventbus.redisio import client

pytestmark = pytest.mark.integration


def test_redis_options_reach_the_client_and_the_server_sees_them(redis_server, names):
    opts = parse_reader_options({"url": redis_server.url, "stream": names["stream"],
                                 "group": "g", "redis.client_name": f"billing-{names['tag']}",
                                 "redis.socket_timeout": "90",
                                 "redis.health_check_interval": "0"}, streaming=True)
    r = client(opts.connection)
    assert r.ping()
    kwargs = r.connection_pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["health_check_interval"]) == (90.0, 0.0)
    assert kwargs["socket_keepalive"] is True  # not given: the connector's default stays
    seen = {c["name"] for c in redis_server.client().client_list()}
    assert f"billing-{names['tag']}" in seen
    # AckingBatchWriter takes the reader's options dict, redis.* included
    writer = AckingBatchWriter(lambda df, batch_id: None, {
        "url": redis_server.url, "group": "g", "redis.client_name": "acking"})
    assert dict(writer.spec.client_settings) == {"client_name": "acking"}
