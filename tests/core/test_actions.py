"""Tests for evolving_rl.core.actions: the action tag, ALFWorld commands, Mind2Web actions."""

import time

import pytest

from evolving_rl.core.actions import (
    ActionStatus,
    WebAction,
    WebOp,
    extract_action,
    parse_alfworld_action,
    parse_web_action,
)

ADMISSIBLE = ["go to desk 1", "take mug 1 from desk 1", "open drawer 2", "look", "inventory"]


# --- tag extraction ----------------------------------------------------------------------------


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


# --- ALFWorld ----------------------------------------------------------------------------------


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


# --- Mind2Web ----------------------------------------------------------------------------------


def web(content):
    return parse_web_action(f"<action>{content}</action>")


def assert_web(content, op, ref, value=None):
    result = web(content)
    assert result.ok, result.status
    assert result.status is ActionStatus.OK
    assert result.action == WebAction(op, ref, value)


@pytest.mark.parametrize(
    ("content", "op", "ref", "value"),
    [
        ('{"op": "CLICK", "ref": "e3"}', WebOp.CLICK, "e3", None),
        ('{"op": "click", "ref": "e3", "value": "ignored"}', WebOp.CLICK, "e3", None),
        ('{"op": "TYPE", "ref": "e12", "value": " New York "}', WebOp.TYPE, "e12", "New York"),
        ('{"op": "Select", "ref": "E7", "value": "Economy"}', WebOp.SELECT, "e7", "Economy"),
        ('{"op": "TYPE", "ref": "e1", "value": 10001}', WebOp.TYPE, "e1", "10001"),
        ('{"op": "HOVER", "ref": "e4"}', WebOp.CLICK, "e4", None),
        ('{"op": "enter", "ref": "e5", "value": ""}', WebOp.CLICK, "e5", None),
        ('{"OP": "TYPE", "Ref": "e2", "VALUE": "x"}', WebOp.TYPE, "e2", "x"),
        ('{"op": "CLICK", "ref": "[e9]"}', WebOp.CLICK, "e9", None),
        ('{"op": "CLICK", "ref": "e3"} because it is the button', WebOp.CLICK, "e3", None),
        ('```json\n{"op": "CLICK", "ref": "e3"}\n```', WebOp.CLICK, "e3", None),
        ('I will click: {"op": "CLICK", "ref": "e3"}', WebOp.CLICK, "e3", None),
        ('{"op": "TYPE", "ref": "e2", "value": "a {b} \\"c\\""}', WebOp.TYPE, "e2", 'a {b} "c"'),
    ],
)
def test_web_json(content, op, ref, value):
    assert_web(content, op, ref, value)


@pytest.mark.parametrize(
    ("content", "op", "ref", "value"),
    [
        ("CLICK e3", WebOp.CLICK, "e3", None),
        ("click e3", WebOp.CLICK, "e3", None),
        ("TYPE e12 | New York", WebOp.TYPE, "e12", "New York"),
        ("TYPE e12|New York", WebOp.TYPE, "e12", "New York"),
        ("type e12 | a | b", WebOp.TYPE, "e12", "a | b"),
        ("TYPE e12 New  York", WebOp.TYPE, "e12", "New  York"),
        ("SELECT [e4] | Two adults", WebOp.SELECT, "e4", "Two adults"),
        ("HOVER e8", WebOp.CLICK, "e8", None),
        ("ENTER e2", WebOp.CLICK, "e2", None),
        ("CLICK e3 | ignored", WebOp.CLICK, "e3", None),
        ("TYPE e1 | {curly}", WebOp.TYPE, "e1", "{curly}"),
    ],
)
def test_web_fallback(content, op, ref, value):
    assert_web(content, op, ref, value)


def test_web_unclosed_tag():
    result = parse_web_action('<reasoning>r</reasoning><action>{"op": "CLICK", "ref": "e3"}')
    assert result.action == WebAction(WebOp.CLICK, "e3")


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ('{"op": "CLICK", "ref": "e3"}', ActionStatus.NO_ACTION_TAG),
        ("<action> </action>", ActionStatus.EMPTY_ACTION),
        ("<action>``` ```</action>", ActionStatus.EMPTY_ACTION),
        ('<action>{"op": "CLICK", "ref": </action>', ActionStatus.INVALID_JSON),
        ('<action>["CLICK", "e3"]</action>', ActionStatus.BAD_OP),
        ("<action>{'op': 'CLICK'}</action>", ActionStatus.INVALID_JSON),
        ('<action>{"op": "SCROLL", "ref": "e3"}</action>', ActionStatus.BAD_OP),
        ('<action>{"ref": "e3"}</action>', ActionStatus.BAD_OP),
        ('<action>{"op": 3, "ref": "e3"}</action>', ActionStatus.BAD_OP),
        ('<action>{"op": "CLICK"}</action>', ActionStatus.MISSING_REF),
        ('<action>{"op": "CLICK", "ref": "  "}</action>', ActionStatus.MISSING_REF),
        ('<action>{"op": "CLICK", "ref": null}</action>', ActionStatus.MISSING_REF),
        ('<action>{"op": "CLICK", "ref": "button"}</action>', ActionStatus.BAD_REF),
        ('<action>{"op": "CLICK", "ref": 3}</action>', ActionStatus.BAD_REF),
        ('<action>{"op": "CLICK", "ref": "e3x"}</action>', ActionStatus.BAD_REF),
        ('<action>{"op": "TYPE", "ref": "e3"}</action>', ActionStatus.MISSING_VALUE),
        ('<action>{"op": "TYPE", "ref": "e3", "value": "  "}</action>', ActionStatus.MISSING_VALUE),
        (
            '<action>{"op": "SELECT", "ref": "e3", "value": null}</action>',
            ActionStatus.MISSING_VALUE,
        ),
        ('<action>{"op": "TYPE", "ref": "e3", "value": true}</action>', ActionStatus.MISSING_VALUE),
        (
            '<action>{"op": "TYPE", "ref": "e3", "value": ["x"]}</action>',
            ActionStatus.MISSING_VALUE,
        ),
        ("<action>CLICK</action>", ActionStatus.MISSING_REF),
        ("<action>CLICK | e3</action>", ActionStatus.MISSING_REF),
        ("<action>CLICK the button</action>", ActionStatus.BAD_REF),
        ("<action>PRESS e3</action>", ActionStatus.BAD_OP),
        ("<action>TYPE e3</action>", ActionStatus.MISSING_VALUE),
        ("<action>TYPE e3 |   </action>", ActionStatus.MISSING_VALUE),
        ("<action>| hello</action>", ActionStatus.UNPARSEABLE),
        ('<action>Do {"op": "SCROLL"}</action>', ActionStatus.BAD_OP),
    ],
)
def test_web_failures(text, status):
    result = parse_web_action(text)
    assert not result.ok
    assert result.action is None
    assert result.status is status


def test_web_action_to_dict():
    assert WebAction(WebOp.TYPE, "e1", "x").to_dict() == {"op": "TYPE", "ref": "e1", "value": "x"}
    assert WebAction(WebOp.CLICK, "e1").to_dict() == {"op": "CLICK", "ref": "e1", "value": None}


def test_status_values_are_stable_strings():
    assert ActionStatus.NOT_ADMISSIBLE == "not_admissible"
    assert f"{ActionStatus.OK}" == "ok"
    assert {str(status) for status in ActionStatus} == {
        "ok",
        "no_action_tag",
        "empty_action",
        "not_admissible",
        "invalid_json",
        "unparseable",
        "bad_op",
        "missing_ref",
        "bad_ref",
        "missing_value",
    }
