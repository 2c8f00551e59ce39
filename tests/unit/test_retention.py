from __future__ import annotations

from spark_eventbus.core.ids import StreamId
from spark_eventbus.core.retention import GroupPosition, TrimBound, trim_bound


def sid(text: str) -> StreamId:
    return StreamId.parse(text)


def test_a_group_needs_its_oldest_pending_entry_or_the_one_after_its_position():
    assert GroupPosition("g", sid("10-0"), None).needs_from == sid("10-1")
    assert GroupPosition("g", sid("10-0"), sid("5-3")).needs_from == sid("5-3")
    assert GroupPosition("g", sid("0-0"), None).needs_from == sid("0-1")


def test_the_bound_is_the_oldest_need_of_any_group_and_names_it():
    groups = [GroupPosition("fast", sid("90-0"), None),
              GroupPosition("pending", sid("60-0"), sid("10-0")),
              GroupPosition("slow", sid("30-0"), None)]
    assert trim_bound(groups) == TrimBound(sid("10-0"), "pending")
    groups[1] = GroupPosition("pending", sid("60-0"), None)
    assert trim_bound(groups) == TrimBound(sid("30-1"), "slow")


def test_a_stream_without_groups_is_never_trimmed():
    assert trim_bound([]) == TrimBound(None, None)
