"""The ACL rules the security guide shows are the ones ``eventbus acl-rule`` prints."""

from __future__ import annotations

import re
from pathlib import Path

from spark_eventbus.ops.acl import rule


def test_the_rules_in_the_security_guide_are_the_ones_acl_rule_prints():
    """docs/security.md shows each role's rule for the stream `orders` (and `orders:dlq`):
    what `eventbus acl-rule` prints, not a copy that drifts from it."""
    shown = re.findall(r"^ACL SETUSER spark-([a-z-]+) on ><password> (.+)$",
                       (Path(__file__).parents[2] / "docs" / "security.md").read_text(),
                       re.MULTILINE)
    assert {role for role, _ in shown} >= {"streaming-reader", "sink", "acking-writer", "cli"}
    for role, text in shown:
        assert text in (rule(role, ["orders"], "orders:dlq"), rule(role, ["orders"])), role
