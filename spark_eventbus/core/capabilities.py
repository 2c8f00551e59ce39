"""What a server can do, and what the options ask of it: checked once when a query starts
(``load()``/``start()``), never mid-query. Pure; the probe is
:func:`spark_eventbus.redisio.capabilities.server_capabilities`."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from .ids import is_digits

# The commands newer than the oldest server supported that some path may use, each probed by
# name (:mod:`.redisio.capabilities`), never inferred from a version: Valkey reports its own
# numbers, forks and backports add commands, and a server may rename a command away.
# WAITAOF backs option waitAof; XACKDEL (Redis >= 8.2, Valkey's next release) lets deleteAtAck
# delete an entry at ack time once every group has acked it; XDELEX (the same releases) lets
# `eventbus dlq replay` delete what it moved together with the groups' references to it.
USED_COMMANDS = ("waitaof", "xackdel", "xdelex")
# Commands newer than any server a lane runs (docs/redis-8.md: how each would map onto the
# connector): probed by name like the others so that a start-up log can say the server has
# them and they are not used yet; no code path sends them. (XREADGROUP's CLAIM, Redis 8.4, and
# XADD's IDMP, 8.6, are arguments, not commands: a probe without a key cannot see them.)
LATER_COMMANDS = ("xnack",)
OPTIONAL_COMMANDS = (*USED_COMMANDS, *LATER_COMMANDS)


@dataclass(frozen=True)
class Capabilities:
    """A server's family (``redis`` or ``valkey``) and version (for messages), and the
    features the connector may use: Lua scripting (Valkey can run without its Lua engine;
    None: the server has it but the ACL user may not load scripts, or it was not probed) and
    which of
    ``OPTIONAL_COMMANDS`` every node knows (``WAITAOF``: Redis >= 7.2 and Valkey;
    ``XACKDEL``, ``XDELEX``: Redis >= 8.2; ``XNACK``: Redis >= 8.8, not used)."""

    family: str
    version: tuple[int, int, int]
    has_lua: bool | None
    commands: frozenset[str] = frozenset()

    @property
    def has_waitaof(self) -> bool:
        return "waitaof" in self.commands

    @property
    def has_xackdel(self) -> bool:
        return "xackdel" in self.commands

    @property
    def has_xdelex(self) -> bool:
        return "xdelex" in self.commands

    @property
    def not_used(self) -> list[str]:
        """The later commands (:data:`LATER_COMMANDS`) this server has, upper-case: named in a
        start-up log line, not used."""
        return [c.upper() for c in LATER_COMMANDS if c in self.commands]

    @property
    def display(self) -> str:
        return f"{self.family} {'.'.join(map(str, self.version))}"


def parse_version(text: str) -> tuple[int, int, int]:
    """``7.0.15`` → (7, 0, 15); missing or odd parts are 0."""
    parts = [*(int(p) if is_digits(p) else 0
               for p in text.strip().split(".")[:3]), 0, 0, 0]
    return parts[0], parts[1], parts[2]


# Why each part runs Lua scripts: named in the refusal (``require_scripting``'s ``why``).
READER_SCRIPTS = "its claims, plans and leases are atomic scripts"
DEAD_LETTER_SCRIPTS = "each chunk of malformed rows is added to the dead-letter stream by a script"


def require_scripting(caps: Capabilities, what: str, server: str,
                      why: str = READER_SCRIPTS, role: str = "streaming-reader") -> None:
    """``what`` (a part of the connector) runs Lua scripts (``why``): refuse a server without
    them, and a user who may not load them (``has_lua`` None), naming the ACL rule of its
    ``role`` (``eventbus acl-rule``) — not a missing engine."""
    if caps.has_lua is False:
        raise ConfigError(
            f"{what} needs Lua scripting ({why}), but the server at {server} ({caps.display}) "
            "has no Lua engine: start it with Lua scripting enabled (Valkey: the Lua engine "
            "loaded), or use another server.")
    if caps.has_lua is None:
        dlq = " --dlq <dead-letter stream>" if role == "acking-writer" else ""
        raise ConfigError(
            f"{what} runs Lua scripts ({why}), which the Redis ACL user may not load at "
            f"{server} ({caps.display}: SCRIPT LOAD was refused with NOPERM, an ACL refusal). "
            f"Give the user the rule of its role: `eventbus acl-rule --role {role} --stream "
            f"<stream>{dlq}` prints it (it has +evalsha +script|load +script|exists; "
            "docs/security.md: ACL rules).")


def streams_too_old(server: str, told: str) -> ConfigError:
    """The server's stream commands lack what Redis 7.0 added (``told``: how it showed): a
    group's entries-read count and lag (``XINFO GROUPS``, ``XGROUP … ENTRIESREAD``), on which
    loss detection and exact lag rest, and ``XAUTOCLAIM``'s list of deleted entries."""
    at = f" at {server}" if server else ""
    return ConfigError(
        f"the server{at} lacks the stream features of Redis 7.0 ({told}): a consumer "
        "group's entries-read count and lag, on which this connector's data-loss detection "
        "rests. Use Redis >= 7.0 or Valkey >= 7.2.")


def require_option(caps: Capabilities, option: str, value: str, feature: str,
                   have: bool, server: str, fix: str) -> None:
    """Refuse ``option`` (as spelled in messages: ``option 'waitAof'``, ``--wait-aof``) =
    ``value`` when the server lacks ``feature``."""
    if not have:
        raise ConfigError(f"{option} = {value} needs {feature}, which the server at {server} "
                          f"({caps.display}) does not have; {fix}.")
