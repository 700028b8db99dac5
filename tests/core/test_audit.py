"""Tests for evolving_rl.core.audit: the reference's rules at and just below each threshold.

"ref:N" is a line of the reference's src/utils/skill_audit.py (Fanzy27/Evolving-RL).
"""

import itertools
import random
import time

import pytest

from evolving_rl.core.audit import (
    SUSPICIOUS_NAME_KEYWORDS,
    AuditConfig,
    AuditRule,
    audit_text,
    suspicious_name_keyword,
)

CLEAN = (
    "Go to the countertop and take the mug. Then go to the microwave, open it, heat the mug "
    "and close it again. Finally put the mug in the cabinet.\n- Check every drawer once.\t(ok)"
)


def rule_of(text, config=None):
    return audit_text(text, config).rule


def lines(*rows):
    return "\n".join(rows)


def test_clean_text_passes():
    assert audit_text(CLEAN) == audit_text(CLEAN, AuditConfig())
    result = audit_text(CLEAN)
    assert (result.ok, result.rule, result.detail) == (True, None, "")


@pytest.mark.parametrize("text", ["", "   ", "\n\t\n", "\x85\u2028 "])
def test_empty_or_blank_text_passes(text):
    assert audit_text(text).ok


def test_rule_values_are_stable_strings():
    assert [str(rule) for rule in AuditRule] == [
        "suspicious_unicode",
        "non_english",
        "repeated_char_run",
        "repeated_token_run",
        "repeated_chunk",
        "repeated_line",
        "low_ngram_diversity",
    ]


# --- rule 1: suspicious characters (ref:85-115) ------------------------------------------------


@pytest.mark.parametrize(
    ("char", "reason"),
    [
        ("\ufffd", "replacement character"),  # category So: only its own check catches it
        ("\x00", "control character"),
        ("\x07", "control character"),
        ("\x0b", "control character"),
        ("\x1f", "control character"),
        ("\x7f", "control character"),
        ("\u200b", "category Cf"),  # ZERO WIDTH SPACE
        ("\ufeff", "category Cf"),  # ZERO WIDTH NO-BREAK SPACE
        ("\u202e", "category Cf"),  # bidi override
        ("\u00ad", "category Cf"),  # soft hyphen
        ("\ue000", "category Co"),  # private use
        ("\U000e0fff", "category Cn"),  # unassigned
    ],
)
def test_suspicious_chars(char, reason):
    result = audit_text(f"Go to the{char} desk.")
    assert result.rule is AuditRule.SUSPICIOUS_UNICODE
    assert result.detail.startswith(f"{reason}: U+{ord(char):04X}")
    assert result.detail.endswith("at 9")


def test_lone_surrogate_is_suspicious():
    assert audit_text("a\ud800b").detail.startswith("category Cs: U+D800")


@pytest.mark.parametrize(
    ("char", "keyword"),
    [
        ("\uff01", "FULLWIDTH"),  # FULLWIDTH EXCLAMATION MARK, Po: passes rule 2
        ("\uff4d", "FULLWIDTH"),  # FULLWIDTH LATIN SMALL LETTER M
        ("\uff61", "HALFWIDTH"),  # HALFWIDTH IDEOGRAPHIC FULL STOP, Po
        ("\u27e8", "MATHEMATICAL"),  # MATHEMATICAL LEFT ANGLE BRACKET, Ps
        ("\u205f", "MATHEMATICAL"),  # MEDIUM MATHEMATICAL SPACE, Zs
        ("\U0001d400", "MATHEMATICAL"),  # MATHEMATICAL BOLD CAPITAL A
        ("\u02c2", "MODIFIER LETTER"),  # MODIFIER LETTER LEFT ARROWHEAD, Sk
        ("\u02b0", "MODIFIER LETTER"),  # MODIFIER LETTER SMALL H, Lm
        ("\u0301", "COMBINING"),  # COMBINING ACUTE ACCENT
    ],
)
def test_suspicious_name_keywords(char, keyword):
    result = audit_text(f"take{char}mug")
    assert result.rule is AuditRule.SUSPICIOUS_UNICODE
    assert result.detail.startswith(f"name has {keyword}: U+{ord(char):04X}")


def test_every_name_keyword_matches():
    # ZERO WIDTH names are all Cf, and no assigned name in Unicode 14 contains PRIVATE USE or
    # SMALL FORM VARIANT, so those three are checked on names directly.
    for keyword in SUSPICIOUS_NAME_KEYWORDS:
        assert suspicious_name_keyword(f"SOME {keyword} SIGN") == keyword
    assert suspicious_name_keyword("LATIN SMALL LETTER E WITH ACUTE") is None
    assert audit_text("a\u200cb").detail.startswith("category Cf: U+200C ZERO WIDTH NON-JOINER")


@pytest.mark.parametrize("char", ["\n", "\r", "\t"])
def test_newline_return_tab_allowed(char):
    assert audit_text(f"line one{char}line two").ok


def test_printable_ascii_never_fails():
    assert audit_text("".join(chr(code) for code in range(32, 127))).ok


def test_edge_control_chars_stripped_like_the_reference():
    # ref:277 audits `skill.strip()`: whitespace controls at the ends are gone before rule 1.
    assert audit_text("\x0btake the mug\x1c").ok
    assert rule_of("take\x0bthe mug") is AuditRule.SUSPICIOUS_UNICODE


def test_detail_positions_index_the_given_text():
    assert audit_text("  \n a\u200bb").detail.endswith("at 5")


# --- rule 2: non-English characters (ref:118-138) ----------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "Put the mug in the café.",  # accented Latin letters fail in the reference
        "Straße",
        "Go to the 桌子 and take the mug.",
        "Open the микроволновка first.",
        "T\u0430ke the mug",  # Cyrillic a
        "Heat for 100 \u03bcs",  # Greek mu
        "امسك الكوب",
        "x\u00b2",  # SUPERSCRIPT TWO, No: non-ASCII digits fail
        "x\u0663",  # ARABIC-INDIC DIGIT THREE, Nd
        "a\x85b",  # C1 control: category Cc is not S, P or Z
    ],
)
def test_non_english(text):
    assert rule_of(text) is AuditRule.NON_ENGLISH


def test_non_english_detail():
    assert audit_text("café").detail == "U+00E9 LATIN SMALL LETTER E WITH ACUTE (Ll) at 3"


@pytest.mark.parametrize(
    "text",
    [
        "Step 3: press → then “quote” — 50% of 10° £5 €3 ©",
        "a\u00a0b",  # NO-BREAK SPACE, Zs
        "one\u2028two",  # LINE SEPARATOR, Zl: neither rule 1 nor rule 2 flags it
        "• bullet … ellipsis ‘single’ « guillemets » ±1 ×2 ✓",
    ],
)
def test_non_ascii_symbols_punctuation_spaces_pass(text):
    assert audit_text(text).ok


def test_suspicious_checked_before_non_english():
    assert rule_of("\u4e00\u200b") is AuditRule.SUSPICIOUS_UNICODE


# --- rule 3: repetition (ref:141-186) ----------------------------------------------------------


def test_char_run_threshold():
    assert audit_text("wait" + "!" * 7).ok
    result = audit_text("wait" + "!" * 8)
    assert (result.rule, result.detail) == (AuditRule.REPEATED_CHAR_RUN, "'!' x8")


def test_char_run_is_case_sensitive():
    assert audit_text("aaaaAAAA").ok


def test_newline_runs_are_not_char_runs():
    assert audit_text("line one" + "\n" * 20 + "line two").ok


def test_carriage_return_runs_are_char_runs():
    # `.` in the reference's regex stops only at \n (ref:146)
    assert rule_of("a" + "\r" * 8 + "b") is AuditRule.REPEATED_CHAR_RUN


def test_space_and_tab_runs_collapse_first():
    assert audit_text("a" + " " * 30 + "\t\t\t \t" * 5 + "b").ok
    assert rule_of("a" + "\u00a0" * 8 + "b") is AuditRule.REPEATED_CHAR_RUN  # not collapsed


def test_token_run_threshold():
    assert audit_text(" ".join(["go"] * 7) + " home").ok
    result = audit_text("then " + " ".join(["Go", "GO", "go", "gO"] * 2) + " home")
    assert (result.rule, result.detail) == (AuditRule.REPEATED_TOKEN_RUN, "'go' x8")


def test_token_run_crosses_lines_and_spaces():
    assert rule_of("ok\n" * 8) is AuditRule.REPEATED_TOKEN_RUN


@pytest.mark.parametrize("size", [2, 3, 4])
def test_chunk_repeat_threshold(size):
    chunk = " ".join(["heat", "the", "mug", "now"][:size])
    assert audit_text(" ".join([chunk] * 3) + " done").ok
    result = audit_text("first " + " ".join([chunk.upper()] * 4) + " done")
    assert (result.rule, result.detail) == (AuditRule.REPEATED_CHUNK, f"{chunk!r} x4")


def test_min_chunk_chars_threshold():
    assert audit_text("ab cdef " * 4).ok  # "ab cdef": 7 chars
    assert rule_of("ab cdefg " * 4) is AuditRule.REPEATED_CHUNK  # 8 chars


def test_chunk_of_five_tokens_is_not_checked():
    assert audit_text("a b c d e " * 6).ok


def test_chunk_may_start_anywhere_and_span_lines():
    assert rule_of("x y z\ngo house\ngo house\ngo house\ngo house") is AuditRule.REPEATED_CHUNK


def test_line_repeat_count_threshold():
    two = lines("Open the fridge now", "Open the fridge now", "x")
    assert audit_text(two).ok
    result = audit_text(
        lines("Open the fridge now", "  OPEN the fridge now", "Open the fridge now")
    )
    assert result.rule is AuditRule.REPEATED_LINE
    assert result.detail == "3/3 non-blank lines are 'open the fridge now'"


def share_text(repeated, unique):
    """`repeated` copies of one line interleaved with `unique` distinct lines."""
    rows = itertools.zip_longest(
        ["Open the fridge door"] * repeated,
        [f"step {i} is new" for i in range(unique)],
        fillvalue="",
    )
    return lines(*itertools.chain.from_iterable(rows))


def test_line_share_threshold():
    assert audit_text(share_text(49, 51)).ok
    assert rule_of(share_text(50, 50)) is AuditRule.REPEATED_LINE
    assert audit_text(share_text(3, 4)).ok  # 43%
    assert rule_of(share_text(3, 3)) is AuditRule.REPEATED_LINE
    assert rule_of(share_text(49, 51), AuditConfig(min_line_share=0.49)) is AuditRule.REPEATED_LINE


def test_blank_and_short_lines_count_in_the_share():
    repeated = ["Open the fridge door"] * 3
    assert audit_text(lines(*repeated, "\n\n", "ok", "ok.", "fine", "done")).ok  # 3 of 7
    assert rule_of(lines(*repeated, "\n\n", "ok", "ok.", "fine")) is AuditRule.REPEATED_LINE


def test_min_line_chars_threshold():
    eleven, twelve = "open fridge", "open fridges"
    assert audit_text(lines(eleven, "b", eleven, "c", eleven)).ok
    assert rule_of(lines(twelve, "b", twelve, "c", twelve)) is AuditRule.REPEATED_LINE


def test_line_rule_reads_uncollapsed_text():
    assert audit_text(lines("open  the fridge", "open the fridge", "open the  fridge")).ok


def test_repetition_rules_order():
    assert rule_of("zzzzzzzz " + "ok " * 8) is AuditRule.REPEATED_CHAR_RUN
    assert rule_of("ok " * 8 + "a bcdefgh " * 4) is AuditRule.REPEATED_TOKEN_RUN
    text = lines(*["go to the sink now"] * 3, "a bcdefgh " * 4)
    assert rule_of(text) is AuditRule.REPEATED_CHUNK


def _naive_runs(tokens, config):
    """Straight-from-the-rule-text oracle for the token and chunk rules (quadratic)."""
    run = config.max_token_run
    if any(len(set(tokens[s : s + run])) == 1 for s in range(len(tokens) - run + 1)):
        return AuditRule.REPEATED_TOKEN_RUN
    for size in range(config.min_chunk_tokens, config.max_chunk_tokens + 1):
        for s in range(len(tokens)):
            chunk = tokens[s : s + size]
            want = chunk * config.min_chunk_repeats
            if len(" ".join(chunk)) >= config.min_chunk_chars and tokens[s : s + len(want)] == want:
                return AuditRule.REPEATED_CHUNK
    return None


def test_token_and_chunk_rules_match_a_naive_oracle():
    rng = random.Random(7)
    vocab = ["go", "to", "desk", "mug", "a", "heat"]
    configs = [AuditConfig(), AuditConfig(max_token_run=3, min_chunk_repeats=2)]
    fired = set()
    for _, config in itertools.product(range(400), configs):
        tokens = [rng.choice(vocab[: rng.randint(2, 6)]) for _ in range(rng.randint(0, 40))]
        expected = _naive_runs(tokens, config)
        fired.add(expected)
        assert rule_of(" ".join(tokens), config) is expected, tokens
    assert fired == {None, AuditRule.REPEATED_TOKEN_RUN, AuditRule.REPEATED_CHUNK}


# --- the optional n-gram rule ------------------------------------------------------------------

LOOPED = " ".join(f"take mug {i % 3} heat mug put mug" for i in range(12))


def test_ngram_rule_off_by_default():
    assert audit_text(LOOPED).ok


def test_ngram_rule_when_switched_on():
    result = audit_text(LOOPED, AuditConfig(ngram_check=True))
    assert result.rule is AuditRule.LOW_NGRAM_DIVERSITY
    assert "distinct 4-grams" in result.detail
    assert audit_text(LOOPED, AuditConfig(ngram_check=True, min_unique_ngram_ratio=0.0)).ok
    assert audit_text(LOOPED, AuditConfig(ngram_check=True, min_words_for_ngram_check=85)).ok
    assert audit_text(" ".join(f"word{i}" for i in range(200)), AuditConfig(ngram_check=True)).ok


# --- configuration -----------------------------------------------------------------------------


def test_defaults_are_the_reference_values():
    # ref:35-39 and the literals 8 (ref:166), 12 (ref:180), chunk sizes 2..4 (ref:161)
    config = AuditConfig()
    assert (config.max_char_run, config.max_token_run, config.min_chunk_repeats) == (8, 8, 4)
    assert (config.min_chunk_tokens, config.max_chunk_tokens, config.min_chunk_chars) == (2, 4, 8)
    assert (config.min_line_repeats, config.min_line_share, config.min_line_chars) == (
        3,
        0.5,
        12,
    )
    assert not config.ngram_check


@pytest.mark.parametrize(
    ("text", "config"),
    [
        ("aaaa", AuditConfig(max_char_run=4)),
        ("go go go", AuditConfig(max_token_run=3)),
        ("ab cd ab cd", AuditConfig(min_chunk_repeats=2, min_chunk_chars=5)),
        ("a b c d e f a b c d e f", AuditConfig(min_chunk_repeats=2, max_chunk_tokens=6)),
        ("abcdef\nabcdef\nx", AuditConfig(min_line_repeats=2, min_line_chars=6)),
        (
            lines(*["Open the fridge door"] * 3, "a", "b", "c", "d"),
            AuditConfig(min_line_share=0.4),
        ),
    ],
)
def test_custom_thresholds_reach_the_rules(text, config):
    assert audit_text(text).ok
    assert not audit_text(text, config).ok


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_char_run": 1},
        {"max_token_run": 1},
        {"min_chunk_repeats": 1},
        {"min_line_repeats": 1},
        {"min_chunk_tokens": 0},
        {"min_chunk_tokens": 3, "max_chunk_tokens": 2},
        {"min_chunk_chars": -1},
        {"min_line_chars": -1},
        {"min_line_share": 1.5},
        {"min_line_share": -0.1},
        {"ngram_size": 0},
        {"min_words_for_ngram_check": -1},
        {"min_unique_ngram_ratio": 2.0},
    ],
)
def test_config_validation(kwargs):
    with pytest.raises(ValueError):
        AuditConfig(**kwargs)


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        AuditConfig().max_char_run = 5


# --- speed: every rule near-linear on 50 KB ----------------------------------------------------

VARIED = " ".join(f"token{i} — step{i % 7}:" for i in range(2600))
VARIED_LINES = "\n".join(f"line {i} says go to desk {i % 5} “now”" for i in range(1500))


@pytest.mark.parametrize(
    ("text", "config", "rule"),
    [
        (VARIED, AuditConfig(), None),
        (VARIED_LINES, AuditConfig(ngram_check=True), None),
        ("ab" * 25_000, AuditConfig(), None),
        ("the skill is to heat the mug.\n" * 1700, AuditConfig(), AuditRule.REPEATED_LINE),
        ("go to " * 8_400, AuditConfig(), AuditRule.REPEATED_CHUNK),
        ("a b " * 12_500, AuditConfig(min_chunk_repeats=10_000, min_chunk_chars=9), None),
        (("a" * 7 + "b" * 7 + " ") * 3400 + "!" * 8, AuditConfig(), AuditRule.REPEATED_CHAR_RUN),
        ("word " * 10_000, AuditConfig(), AuditRule.REPEATED_TOKEN_RUN),
        ("é" * 50_000, AuditConfig(), AuditRule.NON_ENGLISH),
        ("a\u200b" * 25_000, AuditConfig(), AuditRule.SUSPICIOUS_UNICODE),
    ],
)
def test_50kb_inputs_fast(text, config, rule):
    assert len(text.encode()) >= 50_000
    start = time.perf_counter()
    result = audit_text(text, config)
    assert time.perf_counter() - start < 1.0
    assert result.rule is rule
