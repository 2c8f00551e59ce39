from __future__ import annotations

import pytest

from spark_eventbus import ConfigError
from spark_eventbus.core.capabilities import (
    DEAD_LETTER_SCRIPTS,
    Capabilities,
    parse_version,
    require_option,
    require_scripting,
)


def test_features_are_the_commands_the_probe_found_never_the_version():
    assert parse_version("7.0.15") == (7, 0, 15) and parse_version("9.1") == (9, 1, 0)
    redis70 = Capabilities("redis", (7, 0, 15), True)
    assert not redis70.has_waitaof
    # a new version without the command (renamed away, a fork) has not got it ...
    assert not Capabilities("redis", (8, 2, 1), True).has_waitaof
    # ... and an old or unknown one with it has it
    assert Capabilities("keydb", (6, 3, 4), True, frozenset({"waitaof"})).has_waitaof
    valkey = Capabilities("valkey", (9, 1, 0), True, frozenset({"waitaof", "xackdel"}))
    assert valkey.has_waitaof and valkey.has_xackdel and not redis70.has_xackdel
    assert not valkey.has_xdelex and valkey.not_used == [] == redis70.not_used
    # a later command is named as present and not used, and changes no feature
    redis88 = Capabilities("redis", (8, 8, 0), True, frozenset({"xackdel", "xdelex", "xnack"}))
    assert redis88.not_used == ["XNACK"] and redis88.has_xdelex and not redis88.has_waitaof


def test_a_missing_capability_names_the_server_version_and_the_fix():
    caps = Capabilities("valkey", (9, 1, 0), False)
    with pytest.raises(ConfigError, match=r"needs Lua scripting.*\(valkey 9\.1\.0\) has no Lua"):
        require_scripting(caps, "spark.readStream", "redis://h:6379/0")
    # the server has Lua, the user may not load scripts: the rule of its role, not the engine
    refused = (r"the Redis ACL user may not load.*\(valkey 9\.1\.0: SCRIPT LOAD was refused.*"
               r"eventbus acl-rule --role cli")
    with pytest.raises(ConfigError, match=refused) as err:
        require_scripting(Capabilities("valkey", (9, 1, 0), None), "`eventbus x`", "h",
                          role="cli")
    assert "no Lua engine" not in str(err.value)
    with pytest.raises(ConfigError, match=r"AckingBatchWriter needs Lua scripting \(each chunk "
                                          r"of malformed rows.*\(valkey 9\.1\.0\)"):
        require_scripting(caps, "AckingBatchWriter", "h", DEAD_LETTER_SCRIPTS)
    with pytest.raises(ConfigError, match=r"option 'waitAof' = true needs WAITAOF.*"
                                          r"\(redis 7\.0\.15\).*upgrade"):
        require_option(Capabilities("redis", (7, 0, 15), True), "option 'waitAof'", "true",
                       "WAITAOF", False, "h", "upgrade to Redis 7.2 or later")


def test_a_server_whose_groups_have_no_entries_read_is_refused_naming_what_to_use() -> None:
    """Redis 6.2's XINFO GROUPS has no entries-read (nor lag): loss detection cannot work
    there, so the reader refuses it; 7.0's reply (entries-read nil after XGROUP SETID without
    ENTRIESREAD) is read as it is."""
    from spark_eventbus.redisio.probes import group_of

    op = ("g", "redis://127.0.0.1:1/0")
    v62 = [[b"name", b"g", b"consumers", 0, b"pending", 0, b"last-delivered-id", b"0-0"]]
    with pytest.raises(ConfigError, match=r"Redis 7\.0.*Valkey >= 7\.2") as err:
        group_of(v62, *op)
    assert "127.0.0.1:1" in str(err.value) and "entries-read" in str(err.value)
    v70 = [[*v62[0], b"entries-read", None, b"lag", None]]
    assert group_of(v70, *op) == {b"name": b"g", b"consumers": 0, b"pending": 0,
                                 b"last-delivered-id": b"0-0", b"entries-read": None,
                                 b"lag": None}
    assert group_of([[b"name", b"other"]], *op) is None
