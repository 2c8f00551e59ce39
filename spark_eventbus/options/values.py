"""The value parsers of the option table (:mod:`.options`): each takes the raw value and the
option's name as the user spelled it, and returns the parsed value or raises
:class:`ConfigError` naming the option, echoing the value and saying the fix. Pure (driver)."""

from __future__ import annotations

import datetime as dt
import difflib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.connection import check_url
from ..core.ids import StreamId, is_digits
from ..errors import ConfigError

_WHOLE = re.compile(r"-?[0-9]+")  # a whole number in ASCII digits

Parser = Callable[[str, str], Any]  # (raw value, option name as spelled) -> value
# What each parser takes, in words, for docs/options.md (:func:`described`).
_TAKES: dict[Parser, str] = {}


def _says(parser: Parser, takes: str) -> Parser:
    _TAKES[parser] = takes
    return parser


def _bound(n: float) -> str:
    named = {2**31 - 1: "2³¹−1", 2**40: "2⁴⁰", 2**63 - 1: "2⁶³−1"}
    return named.get(int(n)) or (f"{int(n):,}" if n == int(n) else f"{n:g}")


def described(parser: Parser) -> str:
    """What ``parser`` takes, in words ('' for one the table describes itself)."""
    return _TAKES.get(parser, "")


# Each choice parser's words and the values they stand for (:func:`spoken`).
_CHOICES: dict[Parser, Mapping[str, Any]] = {}


def spoken(parser: Parser, value: Any) -> str | None:
    """The word a choice ``parser`` takes for ``value`` (``fieldsType``'s False → 'string'),
    None for another parser: how docs/options.md shows a default the table stores parsed."""
    return next((w for w, v in _CHOICES.get(parser, {}).items() if v == value), None)


def whole(lo: int, hi: int, fix: str) -> Parser:
    def parse(raw: str, name: str) -> int:
        text = raw.strip()
        # ASCII digits only: int() would take '١٢', '+5' and '1_000' too
        value = int(text) if _WHOLE.fullmatch(text) else None
        if value is None or not lo <= value <= hi:
            raise ConfigError(f"option '{name}' = {raw!r} is invalid: expected a whole number "
                              f"from {lo} to {hi}; {fix}.")
        return value
    return _says(parse, f"a whole number, {_bound(lo)}–{_bound(hi)}")


def boolean(raw: str, name: str) -> bool:
    text = raw.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ConfigError(f"option '{name}' = {raw!r} is invalid: use 'true' or 'false'.")


def choice(values: Mapping[str, Any]) -> Parser:
    def parse(raw: str, name: str) -> Any:
        text = raw.strip().lower()
        if text not in values:
            raise ConfigError(f"option '{name}' = {raw!r} is invalid: use one of "
                              f"{', '.join(values)}.")
        return values[text]
    _CHOICES[parse] = values
    return _says(parse, "one of " + ", ".join(f"`{v}`" for v in values))


def key_name(raw: str, name: str) -> str:
    """A Redis key or name: non-empty, no white space."""
    text = raw.strip()
    if not text or any(c.isspace() for c in text):
        raise ConfigError(f"option '{name}' = {raw!r} is invalid: a Redis key or name must be "
                          "non-empty and contain no white space.")
    return text


def optional_name(raw: str, name: str) -> str | None:
    """A name that a rule of the mode may require: blank is the same as not given."""
    return key_name(raw, name) if raw.strip() else None


def stream_list(raw: str, name: str) -> tuple[str, ...]:
    if not raw.strip():
        return ()  # "required" is a rule of the mode, below
    streams = tuple(key_name(s, name) for s in raw.split(","))
    if len(set(streams)) != len(streams):
        raise ConfigError(f"option '{name}' = {raw!r} names a stream twice; list each once.")
    return streams


def one_stream(raw: str, name: str) -> str:
    if "," in raw:
        raise ConfigError(f"option '{name}' = {raw!r} is invalid for writes: name one stream; "
                          "to route rows to several streams, add a string column named "
                          "'stream'.")
    return key_name(raw, name)


def stream_id_or(*words: str) -> Parser:
    def parse(raw: str, name: str) -> str:
        text = raw.strip()
        if text not in words:
            StreamId.parse(text, what=f"option '{name}' =")
        return text
    return _says(parse, ", ".join(f"`{w}`" for w in words) + " or a stream ID")


_ID = re.compile(r"[0-9]+-[0-9]+")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def starting_position(raw: str, name: str) -> str:
    """``latest``/``$``, ``earliest``/``0``, a stream ID (the group starts after it), or a
    timestamp — epoch milliseconds or ISO-8601 (``2026-11-22T10:00:00Z``; no zone: UTC) —
    where the group starts at the first entry at or after it. Returns the words or the ID to
    create the group at."""
    value = raw.strip()
    if value in ("latest", "earliest", "$", "0") or _ID.fullmatch(value):
        return stream_id_or("latest", "earliest", "$", "0")(value, name)
    ms = _epoch_ms(value, raw, name, "'latest', 'earliest', a stream ID ('1700000000000-0': "
                   "the group starts after it) or a timestamp, epoch milliseconds "
                   "('1700000000000') or ISO-8601 ('2026-11-22T10:00:00Z'), where it starts at "
                   "the first entry at or after it")
    return "0" if ms == 0 else str(StreamId(ms, 0).prev())


def _epoch_ms(value: str, raw: str, name: str, use: str) -> int:
    """A timestamp: epoch milliseconds or ISO-8601 (no zone: UTC); refused naming the option
    and what to ``use``."""
    if is_digits(value):
        ms = int(value)
    else:
        try:
            when = dt.datetime.fromisoformat(value)
        except ValueError:
            raise ConfigError(f"option '{name}' = {raw!r} is invalid: use {use}.") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        ms = (when - _EPOCH) // dt.timedelta(milliseconds=1)  # exact, no float rounding
        if ms < 0:
            raise ConfigError(f"option '{name}' = {raw!r} is before 1970, the first stream "
                              "ID; use 'earliest'.")
    if ms > StreamId.MAX.ms:
        raise ConfigError(f"option '{name}' = {raw!r} is beyond the largest stream ID.")
    return ms


def batch_bound(side: str) -> Parser:
    """A batch read's ``startId`` (``side`` "start") or ``endId`` ("end"), inclusive, as an
    ``XRANGE`` bound: ``-``/``earliest``, ``+``/``latest``, a stream ID, or a timestamp —
    epoch milliseconds (an ID's time part, as Redis reads it) or ISO-8601 — which includes the
    entries of that millisecond."""
    def parse(raw: str, name: str) -> str:
        value = raw.strip()
        words = {"-": "-", "earliest": "-", "+": "+", "latest": "+"}
        if value in words:
            if words[value] != ("-" if side == "start" else "+"):
                raise ConfigError(
                    f"option '{name}' = {raw!r} would read nothing: a batch read "
                    f"{'starting at the newest' if side == 'start' else 'ending at the oldest'}"
                    f" entry's end. Use {'earliest' if side == 'start' else 'latest'} (the "
                    "default), a stream ID or a time.")
            return words[value]
        if _ID.fullmatch(value) or is_digits(value):
            return stream_id_or()(value, name)
        ms = _epoch_ms(value, raw, name, "'earliest', 'latest', a stream ID "
                       "('1700000000000-0') or a timestamp, epoch milliseconds "
                       "('1700000000000') or ISO-8601 ('2026-11-22T10:00:00Z')")
        return f"{ms}-0" if side == "start" else str(ms)  # "<ms>": up to its last entry
    return _says(parse, ("`-`, `earliest`" if side == "start" else "`+`, `latest`")
                 + ", a stream ID or a time (epoch ms or ISO-8601)")


def timestamp_bound(side: str) -> Parser:
    """Kafka's ``startingTimestamp`` (``side`` "start": entries at or after it) and
    ``endingTimestamp`` ("end": entries before it, exclusive) of a batch read: epoch
    milliseconds or ISO-8601, as an ``XRANGE`` bound."""
    def parse(raw: str, name: str) -> str:
        ms = _epoch_ms(raw.strip(), raw, name, "a timestamp, epoch milliseconds "
                       "('1700000000000') or ISO-8601 ('2026-11-22T10:00:00Z')")
        if side == "end" and ms == 0:
            raise ConfigError(f"option '{name}' = {raw!r} would read nothing: it excludes "
                              "entries at or after it, and no stream ID is before 1970.")
        return f"{ms}-0" if side == "start" else f"({ms}-0"
    return _says(parse, "a time: epoch milliseconds or ISO-8601")


@dataclass(frozen=True)
class PerStream:
    """An option's value for each stream (a JSON object by stream name): ``named`` streams'
    own values, ``default`` for the others (JSON key ``*``, else the option's default)."""

    default: str
    named: tuple[tuple[str, str], ...] = ()
    default_given: bool = True  # False: the option's default (not given, or JSON without '*')

    def of(self, stream: str) -> str:
        return next((v for s, v in self.named if s == stream), self.default)

    def given(self, stream: str) -> bool:
        """Whether the user gave ``stream``'s value (by name, by ``*``, or one for all)."""
        return self.default_given or any(s == stream for s, _ in self.named)

    @property
    def streams(self) -> list[str]:
        return [s for s, _ in self.named]


def per_stream(parser: Parser, default: str) -> Parser:
    """``parser`` for one value for every stream, or a JSON object of values by stream name
    (``{"orders": "earliest", "refunds": "2026-11-01T00:00:00Z", "*": "latest"}``; ``*``: the
    streams not named, else ``default``, a parsed value), like Kafka's JSON per
    topic-partition. Which names a query reads is checked once the streams are known
    (:func:`unread_streams`)."""
    def parse(raw: str, name: str) -> PerStream:
        value = raw.strip()
        if not value.startswith("{"):
            return PerStream(parser(raw, name))
        example = ('e.g. {"orders": "earliest", "refunds": "2026-11-01T00:00:00Z", '
                   '"*": "latest"}')
        try:
            obj = json.loads(value)
        except ValueError as exc:
            raise ConfigError(f"option '{name}' = {raw!r} is not valid JSON ({exc}): give one "
                              f"value for every stream, or a JSON object by stream name, "
                              f"{example}.") from None
        bad = [k for k, v in obj.items()
               if isinstance(v, bool) or not isinstance(v, (str, int))] \
            if isinstance(obj, dict) else None
        if bad is None or bad:
            raise ConfigError(f"option '{name}' = {raw!r} is invalid: a JSON object maps stream "
                              f"names to strings or epoch milliseconds, {example}"
                              + (f"; not the value of {bad[0]!r}." if bad else "."))
        named = {k: parser(str(v), f"{name}[{k}]") for k, v in obj.items()}
        star = "*" in named
        return PerStream(named.pop("*") if star else default, tuple(named.items()),
                         default_given=star)
    return _says(parse, f"{described(parser)}; or a JSON object of those by stream name "
                 "(`*`: the others)")


def unread_streams(value: PerStream, name: str, reads: Callable[[str], bool],
                   which: str) -> None:
    """Refuse a stream named in option ``name``'s JSON that the query does not read
    (``reads``; ``which``: the streams it reads, for the message)."""
    for stream in value.streams:
        if not reads(stream):
            raise ConfigError(f"option '{name}' names stream {stream!r}, which this read does "
                              f"not read ({which}); remove it, or correct its name.")


def text(raw: str, name: str) -> str:
    return raw


def secret(raw: str, name: str) -> str | None:
    return raw or None


def existing_file(raw: str, name: str) -> str:
    path = raw.strip()
    if not path or not Path(path).is_file():
        shown = "***" if name == "tlsSecretKeyFile" else repr(raw)
        raise ConfigError(f"option '{name}' = {shown} is invalid: no such file on the driver. "
                          "Give the path of a PEM file readable on the driver and on every "
                          "executor.")
    return path


def secret_file(raw: str, name: str) -> str:
    """The path of a file holding a secret (``passwordFile``, ``usernameFile``): it must exist
    on the driver and hold something; it is read again at every new connection."""
    path = raw.strip()
    try:
        empty = not Path(path).read_text().strip() if path else True
    except OSError as exc:
        raise ConfigError(f"option '{name}' = {raw!r} cannot be read on the driver "
                          f"({type(exc).__name__}: {exc.strerror or exc}): give the path of a "
                          "file readable on the driver and on every executor (e.g. a mounted "
                          "Kubernetes Secret).") from None
    if empty:
        raise ConfigError(f"option '{name}' = {raw!r} is empty: it must hold the secret itself "
                          "(one line).")
    return path


def provider_path(raw: str, name: str) -> str | None:
    """``package.module:callable`` (checked with the other credentials in
    :func:`spark_eventbus.core.connection.connection_spec`); blank is not given."""
    return raw.strip() or None


def url(raw: str, name: str) -> str:
    return check_url(raw, name=f"option '{name}'")


def value_schema(raw: str, name: str) -> str:
    from .value_schema import parse_value_schema  # local: keeps options light to import

    parse_value_schema(raw)  # raises ConfigError naming the option
    return raw


_AGE_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _ms(raw: str) -> int | None:
    """The one rule of durations: ``15m``, ``30s``, ``500ms``, ``1h``, ``1d``, or a bare number
    of milliseconds (ASCII digits); None when ``raw`` is none of these."""
    lowered = raw.strip().lower()
    for unit in ("ms", "s", "m", "h", "d"):
        number = lowered[: -len(unit)].strip()
        if lowered.endswith(unit) and is_digits(number):
            return int(number) * _AGE_UNITS[unit]
    return int(lowered) if is_digits(lowered) else None


def duration(lo: int, hi: int, fix: str) -> Parser:
    """A duration option (every ``…Ms`` option, ``maxTriggerDelay``) in milliseconds, from
    ``lo`` to ``hi``: a number of milliseconds, or with a unit (:func:`_ms`)."""
    def parse(raw: str, name: str) -> int:
        value = _ms(raw)
        if value is None or not lo <= value <= hi:
            raise ConfigError(
                f"option '{name}' = {raw!r} is invalid: expected a duration from {lo} to {hi} "
                "ms, in milliseconds ('30000') or with a unit ('30s', '2m', '500ms', '1h', "
                f"'1d'); {fix}.")
        return value
    return _says(parse, f"a duration, {_bound(lo)}–{_bound(hi)} ms: milliseconds or `30s`, "
                 "`2m`, `500ms`, `1h`, `1d`")


def parse_min_id(raw: str) -> tuple[str | None, int | None]:
    """``minId``: a stream ID (``1700000000000-0`` or ``1700000000000``) or an age such as
    ``7d``, ``24h``, ``30m``, ``90s``, ``500ms`` (entries older than that are trimmed).
    Returns (ID, None) or (None, age in ms)."""
    lowered = raw.strip().lower()
    age = _ms(lowered) if lowered[-1:].isalpha() else None  # a bare number is an ID here
    if age is not None and age > 0:
        return None, age
    try:
        return str(StreamId.parse(lowered if "-" in lowered else f"{lowered}-0",
                                  what="option 'minId' =")), None
    except ConfigError:
        raise ConfigError(
            f"option 'minId' = {raw!r} is invalid: use a stream ID such as '1700000000000-0', "
            "or a positive age such as '7d', '24h', '30m', '90s' or '500ms' to keep entries "
            "newer than that.") from None


def seconds(lo: float, hi: float, fix: str) -> Parser:
    """A number of seconds (redis-py's unit for its timeouts), from ``lo`` to ``hi``."""
    def parse(raw: str, name: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            value = float("nan")
        if not lo <= value <= hi:  # NaN fails too
            raise ConfigError(f"option '{name}' = {raw!r} is invalid: expected seconds from "
                              f"{lo:g} to {hi:g} (redis-py's unit); {fix}.")
        return value
    return _says(parse, f"seconds, {_bound(lo)}–{_bound(hi)}")


for _parser, _takes in (
        (boolean, "`true` or `false`"),
        (key_name, "a Redis key or name (no white space)"),
        (optional_name, "a name"),
        (stream_list, "stream keys, separated by commas"),
        (one_stream, "a stream key"),
        (starting_position, "`latest`, `earliest`, a stream ID or a time (epoch ms or ISO-8601)"),
        (text, "text"),
        (secret, "text (a secret: never logged)"),
        (existing_file, "the path of a readable file"),
        (secret_file, "the path of a readable file (a secret: never logged)"),
        (provider_path, "`module:callable`"),
        (url, "a `redis://`, `rediss://` or `unix://` URL"),
        (value_schema, "a DDL string or `StructType.json()`")):
    _says(_parser, _takes)


# Options ``redis.<name>``: redis-py's own connection settings (its names and units), passed to
# every client the connector makes for the data nodes. What the connector sets itself is refused
# by CLIENT_OWNED, naming the option that sets it.
CLIENT_SETTINGS: dict[str, Parser] = {
    "socket_timeout": seconds(1, 3600, "a reply slower than this fails the command (retried "
                              "within failoverTimeoutMs); it must exceed waitTimeoutMs"),
    "socket_connect_timeout": seconds(0.1, 600, "a connection slower than this fails (retried "
                                      "within failoverTimeoutMs)"),
    "socket_keepalive": boolean,
    "health_check_interval": seconds(0, 3600, "a connection idle this long is checked with a "
                                     "PING before use; 0 turns that off"),
    "client_name": key_name,
}
# What each does, for docs/options.md (the defaults: connection.CLIENT_DEFAULTS).
CLIENT_HELP = {
    "socket_timeout": "seconds a reply may take; must exceed `waitTimeoutMs` when "
                      "`waitReplicas`/`waitAof` wait",
    "socket_connect_timeout": "seconds a connection may take",
    "socket_keepalive": "TCP keepalive on the connections",
    "health_check_interval": "seconds a connection may sit idle before a `PING` checks it on "
                             "use (0: never)",
    "client_name": "the name `CLIENT LIST` shows, e.g. per job",
}
CLIENT_OWNED = {
    "host": "url", "port": "url", "db": "url", "username": "url or usernameFile",
    "password": "password or passwordFile", "credential_provider": "credentialProvider",
    "ssl": "url (rediss://)", "ssl_ca_certs": "tlsCaCert", "ssl_certfile": "tlsCertFile",
    "ssl_keyfile": "tlsSecretKeyFile", "retry": "failoverTimeoutMs",
    "retry_on_timeout": "failoverTimeoutMs", "protocol": "", "decode_responses": "",
}


def client_setting(key: str, raw: str) -> tuple[str, Any]:
    """Option ``redis.<key>`` = ``raw`` as (redis-py's keyword, value); an unknown or
    connector-owned one is a :class:`ConfigError` naming it (and the closest, or the option
    that sets it)."""
    name = f"redis.{key}"
    if key in CLIENT_SETTINGS:
        return key, CLIENT_SETTINGS[key](raw, name)
    if key in CLIENT_OWNED:
        use = CLIENT_OWNED[key]
        raise ConfigError(f"option '{name}' is set by the connector itself" + (
            f": use option {use!r}." if use else " (replies are read as it reads them)."))
    close = difflib.get_close_matches(key, list(CLIENT_SETTINGS), n=1, cutoff=0.6)
    raise ConfigError(f"unknown option '{name}'" + (
        f" (did you mean 'redis.{close[0]}'?)" if close else "") + ": the redis.* options "
        f"are {', '.join('redis.' + k for k in CLIENT_SETTINGS)} (redis-py's names and units; "
        "the README's redis.* table).")
