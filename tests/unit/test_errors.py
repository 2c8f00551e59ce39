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
        "AckingBatchWriter", "ConfigError", "DataLossError", "EntryDecodeError",
        "EventBusConnectionError", "EventBusDataSource", "EventBusError", "NotAStreamError",
        "RedisCommandError", "ReplicasMissing", "ReplicasShort", "ReplicationError", "StreamId",
        "UnwritableRowError", "register"]


def test_every_error_is_exported_from_the_package_and_named_in_the_tree() -> None:
    """The public surface is complete: every error class of :mod:`spark_eventbus.errors` can
    be imported from the package root and is drawn in the module's error tree."""
    import spark_eventbus
    from spark_eventbus import errors

    kinds = [v for v in vars(errors).values()
             if isinstance(v, type) and issubclass(v, errors.EventBusError)]
    assert len(kinds) >= 11
    tree = (errors.__doc__ or "").split("The whole tree::", 1)[1].split("\n\n", 2)[1]
    for kind in kinds:
        assert getattr(spark_eventbus, kind.__name__) is kind
        assert kind.__name__ in spark_eventbus.__all__
        assert f" {kind.__name__} " in tree, kind.__name__
