from __future__ import annotations

import pytest

from spark_eventbus import ConfigError
from spark_eventbus.capabilities import (
    DEAD_LETTER_SCRIPTS,
    Capabilities,
    parse_version,
    require_option,
    require_scripting,
)


def test_features_are_the_commands_the_probe_found_never_the_version():
    assert parse_version("7.0.15") == (7, 0, 15) and parse_version("9.1") == (9, 1, 0)
    redis70 = Capabilities("redis", (7, 0, 15), True)
    assert (redis70.has_waitaof, redis70.has_xackdel) == (False, False)
    # a new version without the command (renamed away, a fork) has not got it ...
    assert not Capabilities("redis", (8, 2, 1), True).has_xackdel
    # ... and an old or unknown one with it has it
    backport = Capabilities("keydb", (6, 3, 4), True, frozenset({"waitaof"}))
    assert (backport.has_waitaof, backport.has_xackdel) == (True, False)
    valkey = Capabilities("valkey", (9, 1, 0), True, frozenset({"waitaof", "xackdel"}))
    assert valkey.has_waitaof and valkey.has_xackdel


def test_a_missing_capability_names_the_server_version_and_the_fix():
    caps = Capabilities("valkey", (9, 1, 0), False)
    with pytest.raises(ConfigError, match=r"needs Lua scripting.*\(valkey 9\.1\.0\) has no Lua"):
        require_scripting(caps, "spark.readStream", "redis://h:6379/0")
    require_scripting(Capabilities("valkey", (9, 1, 0), None), "x", "h")  # unknown: no refusal
    with pytest.raises(ConfigError, match=r"AckingBatchWriter needs Lua scripting \(each chunk "
                                          r"of malformed rows.*\(valkey 9\.1\.0\)"):
        require_scripting(caps, "AckingBatchWriter", "h", DEAD_LETTER_SCRIPTS)
    with pytest.raises(ConfigError, match=r"option 'waitAof' = true needs WAITAOF.*"
                                          r"\(redis 7\.0\.15\).*upgrade"):
        require_option(Capabilities("redis", (7, 0, 15), True), "option 'waitAof'", "true",
                       "WAITAOF", False, "h", "upgrade to Redis 7.2 or later")
