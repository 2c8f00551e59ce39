"""Sink options: defaults, validation, warnings (no Redis, no Spark)."""

from __future__ import annotations

import logging
import re

import pytest

from spark_eventbus import ConfigError
from spark_eventbus.options.reader import parse_reader_options
from spark_eventbus.options.values import parse_min_id
from spark_eventbus.options.writer import parse_sink_options


def test_defaults_follow_the_design_contract():
    o = parse_sink_options({"stream": "out"})
    assert (o.url, o.stream, o.dead_letter_stream) == ("redis://localhost:6379/0", "out", None)
    assert (o.max_len, o.min_id, o.min_age_ms, o.trim_approximate) == (None, None, None, True)
    assert o.trim_acked_only is False  # trimPolicy=keepref, Redis's own default
    assert parse_sink_options({"stream": "o", "maxLen": "5", "trimPolicy": "ACKED"}
                              ).trim_acked_only
    assert (o.max_payload_bytes, o.idempotent, o.chunk_size) == (4 * 1024 * 1024, True, 1000)
    assert not o.trims
    assert parse_sink_options({}).stream is None  # a 'stream' column may route instead


@pytest.mark.parametrize(("raw", "expected"), [
    ("1700000000000-5", ("1700000000000-5", None)),
    ("1700000000000", ("1700000000000-0", None)),
    ("7d", (None, 7 * 86_400_000)),
    ("24h", (None, 86_400_000)),
    ("30m", (None, 1_800_000)),
    ("90s", (None, 90_000)),
    ("500ms", (None, 500)),
])
def test_min_id_is_a_stream_id_or_an_age(raw, expected):
    assert parse_min_id(raw) == expected


@pytest.mark.parametrize(("opts", "message"), [
    ({"stream": "a,b"}, "name one stream; to route rows to several streams, add a string"),
    ({"stream": "o", "deadLetterStream": "o"}, "'deadLetterStream' = 'o' is also the target"),
    ({"stream": "o", "maxLen": "0"}, "option 'maxLen' = '0' is invalid"),
    ({"stream": "o", "maxLen": "ten"}, "option 'maxLen' = 'ten' is invalid"),
    ({"stream": "o", "minId": "0h"}, "option 'minId' = '0h' is invalid"),
    ({"stream": "o", "minId": "yesterday"}, "or a positive age such as '7d'"),
    ({"stream": "o", "trimApproximate": "maybe"}, "'trimApproximate' = 'maybe' is invalid"),
    ({"stream": "o", "maxLen": "5", "trimPolicy": "delref"},
     "option 'trimPolicy' = 'delref' is invalid: use one of keepref, acked"),
    ({"stream": "o", "trimPolicy": "acked"}, "trims nothing: add option 'maxLen' or 'minId'"),
    ({"stream": "o", "maxPayloadBytes": "0"}, "option 'maxPayloadBytes' = '0' is invalid"),
    ({"stream": "o", "chunkSize": "20000"}, "option 'chunkSize' = '20000' is invalid"),
    ({"stream": "o", "idempotent": "yes"}, "option 'idempotent' = 'yes' is invalid"),
    ({"stream": "o", "url": "http://u:secret@h"}, "option 'url' = 'http://u:***@h' is invalid"),
])
def test_invalid_values_name_the_option_and_the_fix(opts, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_sink_options(opts)


def test_an_unknown_option_of_a_write_fails_naming_the_closest_one():
    with pytest.raises(ConfigError, match=re.escape(
            "unknown option 'maxLength' (did you mean 'maxLen'?)")):
        parse_sink_options({"stream": "o", "maxLength": "5"})


def test_reader_options_on_a_write_and_sink_options_on_a_read_are_warned_about(caplog):
    with caplog.at_level(logging.WARNING, logger="spark_eventbus"):
        parse_sink_options({"stream": "o", "group": "g", "maxlen": "5"})
        parse_reader_options({"stream": "o", "group": "g", "maxLen": "5"}, streaming=True)
    text = caplog.text
    assert "option 'group' has no effect on writes" in text
    assert "option 'maxLen' has no effect on reads" in text
    assert "'maxLen' has no effect on writes" not in text
