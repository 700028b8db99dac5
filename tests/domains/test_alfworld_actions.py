"""Tests for evolving_rl.domains.alfworld_actions: ALFWorld commands in the action tag."""

import pytest

from evolving_rl.core.actions import ActionStatus
from evolving_rl.domains.alfworld_actions import parse_alfworld_action

ADMISSIBLE = ["go to desk 1", "take mug 1 from desk 1", "open drawer 2", "look", "inventory"]


def alf(text, lenient=False):
    return parse_alfworld_action(text, ADMISSIBLE, lenient=lenient)


def test_exact_admissible():
    result = alf("<action>go to desk 1</action>")
    assert (result.ok, result.action, result.status) == (True, "go to desk 1", ActionStatus.OK)


@pytest.mark.parametrize(
    "content",
    ["Go To Desk 1", "  go   to\tdesk 1 ", "go to desk 1.", "'go to desk 1'", '"go to desk 1"'],
)
def test_normalised_match_returns_canonical_command(content):
    result = alf(f"<action>{content}</action>")
    assert result.ok
    assert result.action == "go to desk 1"


def test_unclosed_tag_after_stop_string():
    result = alf("<reasoning>I need the mug.</reasoning>\n<action>take mug 1 from desk 1")
    assert result.ok
    assert result.action == "take mug 1 from desk 1"


def test_not_admissible_keeps_raw_text():
    result = alf("<action>  fly to the moon </action>")
    assert (result.ok, result.action, result.status) == (
        False,
        "fly to the moon",
        ActionStatus.NOT_ADMISSIBLE,
    )


def test_no_tag():
    result = alf("go to desk 1")
    assert (result.ok, result.action, result.status) == (False, None, ActionStatus.NO_ACTION_TAG)


@pytest.mark.parametrize("text", ["<action></action>", "<action>   </action>", "<action>"])
def test_empty_action(text):
    result = alf(text)
    assert (result.ok, result.action, result.status) == (False, None, ActionStatus.EMPTY_ACTION)


def test_numbers_need_lenient_mode():
    result = alf("<action>3</action>")
    assert result.status is ActionStatus.NOT_ADMISSIBLE
    assert result.action == "3"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("3", "open drawer 2"),
        ("1.", "go to desk 1"),
        ("5)", "inventory"),
        ("4: ", "look"),
        ("3. open drawer 2", "open drawer 2"),
        ("2) Take mug 1 from desk 1", "take mug 1 from desk 1"),
        ("1. look", "look"),  # text wins over the number
    ],
)
def test_lenient_numbered(content, expected):
    result = alf(f"<action>{content}</action>", lenient=True)
    assert result.ok
    assert result.action == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<action>1. look \n\nStep 1.\nObservation: you see", "look"),
        ("<action>\n2\nI will go there", ADMISSIBLE[1]),
        ("<action>look\nthen more", "look"),
    ],
)
def test_lenient_first_line_after_an_unclosed_tag(text, expected):
    result = alf(text, lenient=True)
    assert result.ok and result.action == expected
    assert not alf(text).ok  # strict mode still needs the whole content to match


@pytest.mark.parametrize("content", ["0", "6", "99999999999999999999", "3. fly away", "-1",
                                     "fly away\n2"])
def test_lenient_bad_numbers(content):
    result = alf(f"<action>{content}</action>", lenient=True)
    assert result.status is ActionStatus.NOT_ADMISSIBLE
    assert result.action == content


def test_empty_admissible_list():
    result = parse_alfworld_action("<action>look</action>", [])
    assert result.status is ActionStatus.NOT_ADMISSIBLE


def test_duplicate_admissible_first_wins():
    result = parse_alfworld_action("<action>LOOK</action>", ["Look", "look"])
    assert result.action == "Look"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("4 people (1 foot tall) are", "look"),
        ("2: Go to closet in the order 1, 2, 3", ADMISSIBLE[1]),
        ("5=>I am at home", "inventory"),
        ("3. fly away", "open drawer 2"),  # the number is the answer in this format
        ("1\nThe room is transformed", "go to desk 1"),
        ("look", "look"),  # a command's text still matches
    ],
)
def test_number_first_takes_the_leading_number(content, expected):
    result = parse_alfworld_action(f"<action>{content}</action>", ADMISSIBLE, lenient=True,
                                   number_first=True)
    assert result.ok and result.action == expected


@pytest.mark.parametrize("content", ["17743", "9 9999", "0", "2126TRISUALY", "people 4"])
def test_number_first_needs_a_listed_leading_number(content):
    result = parse_alfworld_action(f"<action>{content}</action>", ADMISSIBLE, lenient=True,
                                   number_first=True)
    assert result.status is ActionStatus.NOT_ADMISSIBLE


def test_number_first_only_in_lenient_mode():
    assert not parse_alfworld_action("<action>4 people</action>", ADMISSIBLE,
                                     number_first=True).ok
