"""docs/options.md, made from the option table (``spark_eventbus/options/table.py``): every
option's name, the modes it applies to, its default, what it takes and what it does, with the
page that says more; the ``redis.*`` client settings; the options Spark itself adds.

``python scripts/options_doc.py`` (``make options-doc``) writes the file; ``--check`` (run by
``make lint``) fails when the file differs from what the table makes — an option row edited by
hand in the doc, or a table row whose doc was not made again — and when a row's ``see`` names a
page or a heading that does not exist.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spark_eventbus.core.connection import CLIENT_DEFAULTS, spell  # noqa: E402
from spark_eventbus.options.modes import (  # noqa: E402
    ACKING,
    ALL,
    BATCH,
    READS,
    SINK,
    SPARK_OPTIONS,
    STREAMING,
)
from spark_eventbus.options.table import OPTIONS, Option  # noqa: E402
from spark_eventbus.options.values import (  # noqa: E402
    CLIENT_HELP,
    CLIENT_SETTINGS,
    PerStream,
    described,
    spoken,
)

DOC = ROOT / "docs" / "options.md"
MODE_WORDS = {STREAMING: "streaming", BATCH: "batch", SINK: "sink", ACKING: "acking writer"}

HEAD = """# Options

Every option of spark-eventbus: the modes it applies to, its default, what it takes and what it
does. Names are case-insensitive (`maxEntriesPerTrigger` = `maxentriespertrigger`);
`AckingBatchWriter` also takes them as keyword arguments in snake_case (`dead_letter_stream=`).
An unknown option fails naming the closest one; an option the mode ignores is warned about; a
bad value fails before any task runs, naming the option, the value and the fix.

This page is made from the option table in `spark_eventbus/options/table.py` by
`make options-doc`; `make lint` fails when the two differ, so edit the table, not this page.
"""


def default_of(o: Option) -> str:
    if o.shown is not None:
        return o.shown
    value: Any = o.default
    if isinstance(value, PerStream):  # a default for every stream, as a user writes it
        value = value.default
    word = spoken(o.parse, value)
    if word is not None:
        return f"`{word}`"
    if value is None or value == () or (isinstance(value, tuple) and set(value) == {None}):
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f"`{value}`"
    return str(value)


def modes_of(o: Option) -> str:
    return ", ".join(MODE_WORDS[m] for m in (STREAMING, BATCH, SINK, ACKING) if m in o.modes)


def what_of(o: Option) -> str:
    text = o.help[:1].upper() + o.help[1:] + "."
    if o.doc:
        text += " " + o.doc
    if o.see:
        text += f" [More]({o.see})."
    return text.replace("|", "\\|")


def name_of(o: Option) -> str:
    keyword = spell(o.name, "keyword")
    return f"`{o.name}`" + (f" (`{keyword}`)" if ACKING in o.modes and keyword != o.name
                            else "")


def table(rows: Iterable[Option], with_modes: bool) -> list[str]:
    head = ("| option | " + ("applies to | " if with_modes else "")
            + "default | takes | what it does |")
    out = [head, "|---" * (5 if with_modes else 4) + "|"]
    for o in rows:
        takes = (o.values or described(o.parse)).replace("|", "\\|")
        out.append(f"| {name_of(o)} | " + (f"{modes_of(o)} | " if with_modes else "")
                   + f"{default_of(o)} | {takes} | {what_of(o)} |")
    return out


def render() -> str:
    connection = [o for o in OPTIONS if o.modes == ALL]
    reads = [o for o in OPTIONS if o.modes & READS and o.modes != ALL]
    sink = [o for o in OPTIONS if SINK in o.modes and o.modes != ALL]
    acking = [o for o in OPTIONS if ACKING in o.modes and o.modes != ALL]
    sections = (
        ("Where Redis is (every mode)",
         "Reads, the sink and `AckingBatchWriter` take these alike; the `eventbus` CLI takes "
         "them as flags (`--tls-key-file` for `tlsSecretKeyFile`, the others in kebab-case).",
         connection, False),
        ("Reads",
         "`spark.readStream.format(\"eventbus\")` (streaming) and "
         "`spark.read.format(\"eventbus\")` (batch). Without `group`, a streaming read keeps "
         "its positions in Spark's checkpoint; the options of a consumer group are then "
         "refused.", reads, True),
        ("The sink", "`df.write` and `df.writeStream.format(\"eventbus\")`.", sink, False),
        ("AckingBatchWriter",
         "`AckingBatchWriter(handler, group=…, …)`: besides `handler` and `is_valid`, these and "
         "the connection's options, as keyword arguments or a dict.", acking, False),
    )
    lines = [HEAD]
    for title, intro, rows, with_modes in sections:
        lines += [f"## {title}", "", intro, "", *table(rows, with_modes), ""]
    lines += ["## Client settings (`redis.*`)", "",
              "Like Kafka's `kafka.*`, options prefixed `redis.` go to redis-py's client of the "
              "data nodes, with redis-py's names and units (seconds), over the connector's "
              "defaults, in every mode. Anything else after `redis.` is refused, naming the "
              "closest of these or the option that sets it.", "",
              "| option | default | takes | what it does |", "|---|---|---|---|"]
    for key, parser in CLIENT_SETTINGS.items():
        default = CLIENT_DEFAULTS[key]
        shown = f"`{str(default).lower()}`" if isinstance(default, bool | str) else default
        lines.append(f"| `redis.{key}` | {shown} | {described(parser)} | "
                     f"{CLIENT_HELP[key]} |")
    lines += ["", "## Spark's own options", "",
              "Spark adds these to a data source's options itself; they are accepted silently "
              "in every mode (`spark_eventbus/options/modes.py` says where each comes from in "
              "Spark's code): " + ", ".join(f"`{n}`" for n in sorted(SPARK_OPTIONS)) + ".", ""]
    return "\n".join(lines)


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def broken_links() -> list[str]:
    problems = []
    for o in OPTIONS:
        if not o.see:
            continue
        page, _, anchor = o.see.partition("#")
        path = (DOC.parent / page).resolve()
        if not path.exists():
            problems.append(f"option {o.name}: see={o.see!r}: no such page")
            continue
        slugs = {_slug(line.lstrip("#")) for line in path.read_text().splitlines()
                 if line.startswith("#")}
        if anchor and anchor not in slugs:
            problems.append(f"option {o.name}: see={o.see!r}: no heading '#{anchor}' in {page}")
    return problems


def main() -> int:
    text = render()
    problems = broken_links()
    if "--check" in sys.argv:
        current = DOC.read_text() if DOC.exists() else ""
        if current != text:
            diff = difflib.unified_diff(current.splitlines(), text.splitlines(),
                                        "docs/options.md", "made from the option table",
                                        lineterm="", n=0)
            problems.append("docs/options.md differs from the option table "
                            "(spark_eventbus/options/table.py): edit the table, then run "
                            "`make options-doc`:\n" + "\n".join(list(diff)[:20]))
    else:
        DOC.write_text(text)
    for problem in problems:
        print(f"options_doc: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
