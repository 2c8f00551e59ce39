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
    assert isinstance(auth, ConfigError) and "'password' option" in str(auth)
    assert isinstance(translate(redis.ResponseError("NOGROUP x"), "claiming"), RedisCommandError)


def test_public_names_are_pinned():
    assert sorted(spark_eventbus.__all__) == [
        "AckingBatchWriter", "ConfigError", "DataLossError", "EventBusConnectionError",
        "EventBusDataSource", "EventBusError", "NotAStreamError", "RedisCommandError", "StreamId",
        "UnwritableRowError", "register"]
