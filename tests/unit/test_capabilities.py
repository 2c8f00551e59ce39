from __future__ import annotations

import pytest

from spark_eventbus import ConfigError
from spark_eventbus.capabilities import (
    SINK_SCRIPTS,
    Capabilities,
    parse_version,
    require_option,
    require_scripting,
)


def test_features_follow_each_familys_versions():
    assert parse_version("7.0.15") == (7, 0, 15) and parse_version("9.1") == (9, 1, 0)
    redis70 = Capabilities("redis", (7, 0, 15), True)
    assert (redis70.has_waitaof, redis70.has_xackdel) == (False, False)
    assert Capabilities("redis", (7, 2, 0), True).has_waitaof
    assert Capabilities("redis", (8, 2, 1), True).has_xackdel
    valkey91 = Capabilities("valkey", (9, 1, 0), True)
    assert (valkey91.has_waitaof, valkey91.has_xackdel) == (True, False)
    assert Capabilities("valkey", (9, 2, 0), True).has_xackdel
    assert not Capabilities("keydb", (6, 3, 4), True).has_xackdel  # unknown family: never assumed


def test_a_missing_capability_names_the_server_version_and_the_fix():
    caps = Capabilities("valkey", (9, 1, 0), False)
    with pytest.raises(ConfigError, match=r"needs Lua scripting.*\(valkey 9\.1\.0\) has no Lua"):
        require_scripting(caps, "spark.readStream", "redis://h:6379/0")
    require_scripting(Capabilities("valkey", (9, 1, 0), None), "x", "h")  # unknown: no refusal
    with pytest.raises(ConfigError, match=r"the sink needs Lua scripting \(a chunk whose "
                                          r"transaction cannot run.*\(valkey 9\.1\.0\)"):
        require_scripting(caps, "the sink", "h", SINK_SCRIPTS)
    with pytest.raises(ConfigError, match=r"option 'waitAof' = true needs WAITAOF.*"
                                          r"\(redis 7\.0\.15\).*upgrade"):
        require_option(Capabilities("redis", (7, 0, 15), True), "option 'waitAof'", "true",
                       "WAITAOF", False, "h", "upgrade to Redis 7.2 or later")
