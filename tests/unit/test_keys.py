"""Derived keys (spark_eventbus.core.keys): unique per stream and role, in the stream's slot."""

from __future__ import annotations

import itertools
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot as redis_py_key_slot

from spark_eventbus.core.keys import (
    consumer_keys,
    derived_key,
    escape,
    glob_matches,
    hash_tag,
    key_slot,
    lease_key,
    loss_key,
    plan_key,
    sink_marker_key,
    sink_registry_key,
    sink_seal_key,
    sink_seal_of_marker,
    slot_tag,
)

# Names users bring: shared tags, empty tags, stray braces, colons, the escape character,
# unicode, one name a prefix of another, names that look like our own keys.
TRICKY = [
    "orders", "orders:dlq", "orders:", ":orders", "o", "",
    "{acc}:route:0", "{acc}:route:1", "{acc}:route:10", "{acc}", "{acc}x", "x{acc}",
    "{t}:a", "{t}:b", "{t}:a:b", "{t}:a%3Ab", "{t}:a:b:c",
    "{}", "{}x", "a{}b", "{", "}", "}{", "a}b", "a}b{c}", "{{a}}", "{a{b}c}", "a{b",
    "%", "%25", "%3A", ":", "::", "a:b", "a%3Ab",
    "ünïcødé", "{ü}:1", "流", "{流}:订单", "emoji-🙂", "tab\there",
    "{orders}:eventbus:plan:orders:g:c", "eventbus:sink-registry",
]

# Slots published in Redis's documentation (CLUSTER KEYSLOT).
KNOWN_SLOTS = {"somekey": 11058, "foo{hash_tag}": 2515, "foo": 12182, "bar": 5061}


def test_slot_computation_matches_redis_documentation_and_redis_py():
    for key, slot in KNOWN_SLOTS.items():
        assert key_slot(key) == slot
    for key in TRICKY:
        assert key_slot(key) == redis_py_key_slot(key.encode()), key
    assert key_slot("{user1000}.following") == key_slot("{user1000}.followers")


def test_hash_tag_follows_the_cluster_rule():
    assert hash_tag("orders") == "orders"
    assert hash_tag("{tenant1}:orders") == "tenant1"
    assert hash_tag("a{}b") == "a{}b"  # empty tag: the whole key is hashed
    assert hash_tag("{{a}}") == "{a"
    assert hash_tag("a}b{c}") == "c"
    assert hash_tag("a}b") == "a}b"


def _all_keys(names: list[str]) -> dict[str, tuple[str, ...]]:
    """Every derived key over ``names`` used as stream, group/consumer/query/batch parts."""
    out: dict[str, tuple[str, ...]] = {}
    parts = names[:12]

    def add(key: str, what: tuple[str, ...]) -> None:
        assert key not in out or out[key] == what, (key, out.get(key), what)
        out[key] = what

    for stream in names:
        for a, b in itertools.product(parts, repeat=2):
            add(plan_key(stream, a, b), ("plan", stream, a, b))
            add(lease_key(stream, a, b), ("lease", stream, a, b))
            add(loss_key(stream, a, b), ("loss", stream, a, b))
            for task in (0, 1):
                add(sink_marker_key(stream, a, b, task), ("sink", stream, a, b, str(task)))
        for query in parts:
            add(sink_seal_key(stream, query), ("seal", stream, query))
    for query in names:
        add(sink_registry_key(query), ("registry", query))
    return out


def test_derived_keys_are_injective_over_tricky_names():
    keys = _all_keys(TRICKY)
    assert len(keys) == 5 * len(TRICKY) * 12 * 12 + len(TRICKY) * 12 + len(TRICKY)


def test_every_derived_key_lives_in_its_streams_slot():
    for stream in TRICKY:
        for key in (plan_key(stream, "g", "c"), lease_key(stream, "g:1", "{c}"),
                    loss_key(stream, "g", "c:{x}"), sink_marker_key(stream, "q", "7", 3),
                    sink_seal_key(stream, "q:{1}")):
            assert key_slot(key) == key_slot(stream), (stream, key)


def test_streams_sharing_a_tag_get_distinct_keys_in_one_slot():
    routes = [f"{{acc}}:route:{i}" for i in range(3)]
    markers = {sink_marker_key(s, "q", "0", 0) for s in routes}
    plans = {plan_key(s, "g", "c") for s in routes}
    assert len(markers) == len(plans) == 3
    assert {key_slot(k) for k in markers | plans} == {key_slot("{acc}")}


def test_keys_are_readable_for_plain_names():
    assert plan_key("orders", "billing", "spark-billing") == (
        "{orders}:eventbus:plan:orders:billing:spark-billing")
    assert sink_marker_key("{t}:a", "q1", "3", 1) == "{t}:eventbus:sink:%7Bt%7D%3Aa:q1:3:1"
    assert lease_key("a}b", "g", "c").startswith("{slot-")  # no tag can quote 'a}b'
    assert loss_key("orders", "billing", "spark-billing") == (
        "{orders}:eventbus:loss:orders:billing:spark-billing")


def test_a_marker_key_gives_its_seal_key_and_batch():
    """The driver seals what it prunes from the marker keys alone (the registry lists those)."""
    for stream in TRICKY:
        for query in ("q", "write-0f3a", "9c1d:sink:3", "{q}:a%b", ""):
            marker = sink_marker_key(stream, query, "17", 4)
            assert sink_seal_of_marker(marker) == (sink_seal_key(stream, query), 17)
    with pytest.raises(ValueError, match="not a sink marker key"):
        sink_seal_of_marker(plan_key("orders", "g", "1:2"))


def test_a_name_no_brace_can_quote_gets_a_searched_tag_of_its_slot():
    for stream in ("a}b", "}", "{}", "}{", "x{}y}"):
        tag = slot_tag(stream)
        assert "}" not in tag and tag
        assert key_slot("{" + tag + "}") == key_slot(stream)


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=0, max_size=12), st.text(min_size=0, max_size=12),
       st.text(max_size=6), st.text(max_size=6))
def test_property_distinct_inputs_give_distinct_keys_in_the_streams_slot(s1, s2, g, c):
    k1, k2 = plan_key(s1, g, c), plan_key(s2, g, c)
    assert (k1 == k2) == (s1 == s2)
    assert key_slot(k1) == key_slot(s1)
    assert derived_key(s1, "plan", g, c) != derived_key(s1, "lease", g, c)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.sampled_from(TRICKY), st.text(max_size=12)),
       st.one_of(st.sampled_from(TRICKY), st.text(max_size=6)), st.text(max_size=6))
def test_property_a_consumers_keys_at_once_are_its_keys_one_by_one(stream, group, consumer):
    assert consumer_keys(stream, group, consumer) == (
        plan_key(stream, group, consumer), lease_key(stream, group, consumer),
        loss_key(stream, group, consumer))


@given(st.text(max_size=20))
def test_property_escaping_is_reversible_and_removes_separators(text):
    out = escape(text)
    assert not set(out) & set(":{}")
    assert unquote(out) == text


@pytest.mark.parametrize(("pattern", "name", "matches"), [
    ("orders:*", "orders:eu", True), ("orders:*", "order:eu", False),
    ("o?ders", "orders", True), ("o?ders", "oders", False),
    ("orders:[a-c]", "orders:b", True), ("orders:[c-a]", "orders:b", True),  # Redis swaps
    ("orders:[^x]*", "orders:eu", True), ("orders:[^x]*", "orders:x1", False),
    ("orders:[!x]*", "orders:!y", True), ("orders:[!x]*", "orders:eu", False),  # ! is literal
    (r"orders:\*", "orders:*", True), (r"orders:\*", "orders:eu", False),
    ("a.b", "a.b", True), ("a.b", "axb", False),  # no regex leaks through
    ("*", "line\nbreak", True),
])
def test_glob_matches_reads_patterns_as_redis_does(pattern, name, matches):
    assert glob_matches(pattern, name) is matches
