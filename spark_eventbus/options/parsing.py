"""The option table applied to one mode's raw options: unknown names refused with the closest
one, options the mode ignores warned about, every value parsed (:func:`parse_family`); and the
connection settings readers and writers share (:class:`Connected`, :func:`connection_of`)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..core.connection import ConnectionSpec, connection_spec
from ..errors import ConfigError
from .modes import CLIENT_PREFIX, MODE_TEXT, READS, SPARK_OPTIONS
from .table import OPTIONS, SPELLING, log, spelled
from .values import client_setting


def _unknown(keys: list[str], raw: Mapping[str, Any], family: frozenset[str]) -> str:
    """The error of options the connector does not have (a typo would otherwise be ignored,
    and e.g. a misspelt ``startingPosition`` would create the group at ``latest`` for good).
    Spark may pass the keys lower-cased: they are shown as they came."""
    spelled_as = {str(k).lower(): str(k) for k in raw}
    names = sorted({o.name for o in OPTIONS if o.modes & family})
    parts = []
    for key in keys:
        # an option it begins (maxEntries: maxEntriesPerTrigger), else the closest spelling
        close = sorted((k for k in SPELLING if k.startswith(key)), key=len)[:1] or \
            difflib.get_close_matches(key, list(SPELLING), n=1, cutoff=0.6)
        hint = f" (did you mean {spelled(close[0])!r}?)" if close else ""
        parts.append(f"{spelled_as.get(key, key)!r}{hint}")
    what = "reads" if family == READS else MODE_TEXT[min(family)]
    return (f"unknown option{'s' if len(parts) > 1 else ''} {', '.join(parts)}: spark-eventbus "
            f"has no such option. The options of {what}: {', '.join(names)} (the README's "
            "option tables say what each does).")


def parse_family(raw: Mapping[str, Any], mode: str, family: frozenset[str], warn: bool
           ) -> tuple[dict[str, Any], set[str]]:
    """Values of every option of ``family`` (defaults where not given) and the keys given.

    Every option of the family is validated even where ``mode`` ignores it, so that a bad value
    fails as early as possible (Spark's ``schema()`` cannot tell a batch from a streaming read);
    options ``mode`` ignores are warned about.
    """
    given = {str(k).lower(): str(v) for k, v in raw.items() if v is not None}
    client = tuple(client_setting(key[len(CLIENT_PREFIX):], value)
                   for key, value in sorted(given.items()) if key.startswith(CLIENT_PREFIX))
    given = {k: v for k, v in given.items() if not k.startswith(CLIENT_PREFIX)}
    rows = [o for o in OPTIONS if o.modes & family]
    unknown = [key for key in sorted(given) if key not in SPELLING
               and key not in SPARK_OPTIONS and not key.startswith("spark.")]
    if unknown:
        raise ConfigError(_unknown(unknown, raw, family))
    if warn:
        for key in sorted(given):
            if key in SPARK_OPTIONS or key.startswith("spark."):
                continue
            if not any(o.key == key and mode in o.modes for o in rows):
                # an option of the family's other mode, or of writes on a read ("reads")
                where = MODE_TEXT[mode] if any(o.key == key for o in rows) else (
                    "reads" if mode in READS else MODE_TEXT[mode])
                log.warning("spark-eventbus: option '%s' has no effect on %s and is ignored.",
                            spelled(key), where)
    values: dict[str, Any] = {}
    for o in rows:
        value = o.parse(given[o.key], o.name) if o.key in given else o.default
        if mode not in o.modes:
            value = o.default  # validated above, ignored in this mode
        if isinstance(o.attr, tuple):
            values.update(zip(o.attr, value, strict=True))
        else:
            values[o.attr] = value
    values["client_settings"] = client
    return values, set(given)


def connection_of(values: Mapping[str, Any], style: str = "option") -> ConnectionSpec:
    """The :class:`ConnectionSpec` of settings named as the fields of :class:`Connected` (as
    :func:`.connection.connection_spec` names them: parsed option values, or the CLI's parsed
    flags, ``--tls-key-file`` being ``tls_key_file``): the one place settings become a spec,
    and where the rules across them are checked (TLS files, the Sentinel pair, a unix URL, the
    ranges), before any task; messages spell the settings in ``style``."""
    return connection_spec(**{name: values[name] for name in SPEC_FIELDS
                              if name != "client_settings"},
                           client_settings=values.get("client_settings", ()), style=style)


@dataclass(frozen=True)
class Connected:
    """Where Redis is, as both readers and writers take it (options url, password, tls*,
    sentinel*, failoverTimeoutMs, wait*)."""

    url: str
    password: str | None = field(repr=False)
    tls_ca_cert: str | None
    tls_cert_file: str | None
    tls_key_file: str | None = field(repr=False)
    sentinels: tuple[tuple[str, int], ...]
    sentinel_master: str | None
    sentinel_username: str | None
    sentinel_password: str | None = field(repr=False)
    failover_timeout_ms: int
    wait_replicas: int
    wait_timeout_ms: int
    wait_aof: bool
    password_file: str | None
    username_file: str | None
    credential_provider: str | None
    client_settings: tuple[tuple[str, Any], ...]  # options redis.* (connection.ConnectionSpec)

    @property
    def connection(self) -> ConnectionSpec:
        return connection_of({name: getattr(self, name) for name in SPEC_FIELDS})


SPEC_FIELDS = tuple(f.name for f in fields(Connected))


