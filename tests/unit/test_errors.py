from __future__ import annotations

import redis

import spark_eventbus
from spark_eventbus.errors import (
    ConfigError,
    EventBusConnectionError,
    NotAStreamError,
    RedisCommandError,
    redact,
)
from spark_eventbus.redisio import translate


def test_redact_removes_url_passwords_and_literal_secrets():
    assert redact("redis://u:pw@h:1/0 and rediss://:pw2@h") == "redis://u:***@h:1/0 and rediss://:***@h"
    assert redact("it was hunter2!", ["hunter2", None]) == "it was ***!"


def test_translate_maps_redis_errors_to_typed_errors_with_retriable_flags():
    conn = translate(redis.ConnectionError("refused pw"), "reading", ["pw"])
    assert isinstance(conn, EventBusConnectionError) and conn.retriable and "pw" not in str(conn)
    wrong = translate(redis.ResponseError("WRONGTYPE Operation against a key"), "reading")
    assert isinstance(wrong, NotAStreamError) and not wrong.retriable
    auth = translate(redis.AuthenticationError("invalid password"), "connecting")
    assert isinstance(auth, ConfigError) and "option 'password'" in str(auth)
    assert isinstance(translate(redis.ResponseError("NOGROUP x"), "claiming"), RedisCommandError)


def test_a_cluster_in_flux_is_a_retriable_connection_error():
    """Resharding and failover: redirections a node's own connection met (MOVED/ASK), a slot's
    keys split between masters (TRYAGAIN), the cluster client's request TTL run out, a slot
    nobody serves — each says the cluster is busy and may be retried, never 'unexpected'."""
    for exc in (redis.exceptions.AskError("9865 127.0.0.1:21000"),
                redis.exceptions.MovedError("9865 127.0.0.1:21000"),
                redis.exceptions.TryAgainError("Multiple keys request during rehashing"),
                redis.exceptions.ClusterError("TTL exhausted."),
                redis.exceptions.ClusterDownError("The cluster is down"),
                redis.exceptions.MasterDownError("MASTERDOWN Link with MASTER is down"),
                redis.exceptions.SlotNotCoveredError("slot 12 not covered")):
        got = translate(exc, "claiming")
        assert isinstance(got, EventBusConnectionError) and got.retriable, exc
        assert "resharding" in str(got), got


def test_public_names_are_pinned():
    assert sorted(spark_eventbus.__all__) == [
        "AckingBatchWriter", "ConfigError", "DataLossError", "EventBusConnectionError",
        "EventBusDataSource", "EventBusError", "NotAStreamError", "RedisCommandError", "StreamId",
        "UnwritableRowError", "register"]
