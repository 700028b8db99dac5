"""Tests for evolving_rl.core.actions: the action tag and its statuses."""

import time

import pytest

from evolving_rl.core.actions import ActionStatus, extract_action


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<action>look</action>", "look"),
        ("<reasoning>hmm</reasoning>\n<action>  go to desk 1 \n</action>", "go to desk 1"),
        ("<ACTION>look</Action>", "look"),
        ("<action>first</action> then <action>second</action>", "first"),
        ("<action>a <action>b</action>", "b"),
        ("<reasoning>r</reasoning><action> go to desk 1", "go to desk 1"),
        ("<action>x</action", "x"),
        ("<action>x</acti", "x"),
        ("<action>x</", "x"),
        ("<action>x<", "x<"),
        ("<action>old <action> new", "new"),
        ("<action></action>", ""),
        ("<action>", ""),
        ("no tag here", None),
        ("", None),
        ("</action>look", None),
        ("<action >look</action>", None),
    ],
)
def test_extract_action(text, expected):
    assert extract_action(text) == expected


def test_extract_action_multiline_content_kept():
    assert extract_action("<action>\nline1\nline2\n</action>") == "line1\nline2"


def test_extract_action_fast_on_50kb():
    cases = ["<action>" * 6_000, "<action>x" * 6_000 + "</action>", "</action>" * 6_000]
    for text in cases:
        start = time.perf_counter()
        extract_action(text)
        assert time.perf_counter() - start < 1.0


def test_status_values_are_stable_strings():
    assert ActionStatus.NOT_ADMISSIBLE == "not_admissible"
    assert f"{ActionStatus.OK}" == "ok"
    assert {str(status) for status in ActionStatus} == {
        "ok",
        "no_action_tag",
        "empty_action",
        "not_admissible",
        "malformed_action",
    }
