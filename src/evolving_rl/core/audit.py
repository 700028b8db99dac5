"""Rule-based language audit of skill text: the reference's rules, plus an optional n-gram rule.

Owns `AuditConfig` (thresholds; the config layer maps the `audit:` YAML section onto it), the
rules, and `audit_text`, which returns the first rule that fires. The default rules are those of
the reference, which zeroes the extractor reward when any of them fires (Fanzy27/Evolving-RL
src/utils/skill_audit.py; "ref:N" below is a line of that file). They read `text.strip()`
(ref:277) and are checked in this order:

  suspicious_unicode   a char other than \\n \\r \\t that is U+FFFD, a control char (ord < 32 or
                       127), of category Cf, Cs, Co or Cn, or whose Unicode name contains one of
                       `SUSPICIOUS_NAME_KEYWORDS` (ref:24-33, 85-115);
  non_english          a non-ASCII char whose category is not S*, P* or Z*: non-ASCII letters
                       (accented Latin included), digits and marks fail, non-ASCII symbols,
                       punctuation and spaces pass (ref:118-138);
then on the text with every run of spaces and tabs collapsed to one space (ref:142):
  repeated_char_run    `max_char_run` identical consecutive chars other than \\n: the
                       reference's `(.)\\1{7,}` has no DOTALL, so runs of newlines pass (ref:146);
  repeated_token_run   `max_token_run` identical consecutive whitespace-separated tokens,
                       lowercased (ref:150-159);
  repeated_chunk       `min_chunk_tokens`..`max_chunk_tokens` tokens whose space-joined text has
                       at least `min_chunk_chars` chars, repeated `min_chunk_repeats` times in a
                       row (ref:161-176);
then on the uncollapsed text:
  repeated_line        one line (stripped, lowercased, at least `min_line_chars` long) occurring
                       at least `min_line_repeats` times and making up at least
                       `min_line_share` of the non-blank lines (ref:178-185);
  low_ngram_diversity  ours, only with `ngram_check`: for texts of at least
                       `min_words_for_ngram_check` words, distinct word n-grams / all word
                       n-grams below `min_unique_ngram_ratio`.
The reference reports every rule that fires; reporting the first gives the same pass/fail. Each
rule is linear in the text length.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from evolving_rl.core.bounds import FieldError, bounded, check_bounds
from evolving_rl.core.strenum import StrEnum

SUSPICIOUS_NAME_KEYWORDS = (
    "ZERO WIDTH",
    "FULLWIDTH",
    "HALFWIDTH",
    "MATHEMATICAL",
    "MODIFIER LETTER",
    "COMBINING",
    "PRIVATE USE",
    "SMALL FORM VARIANT",
)
_SUSPICIOUS_CATEGORIES = frozenset({"Cf", "Cs", "Co", "Cn"})
# Printable ASCII, \n, \r and \t are never suspicious; only the other chars are looked up.
_MAYBE_SUSPICIOUS = re.compile(r"[^\t\n\r\x20-\x7e]")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_SPACES_AND_TABS = re.compile(r"[ \t]+")
_CHAR_RUN = re.compile(r"(.)\1+")  # `.` stops at \n, as in the reference
_TOKEN = re.compile(r"\S+")
_WORD = re.compile(r"\w+")


class AuditRule(StrEnum):
    SUSPICIOUS_UNICODE = "suspicious_unicode"
    NON_ENGLISH = "non_english"
    REPEATED_CHAR_RUN = "repeated_char_run"
    REPEATED_TOKEN_RUN = "repeated_token_run"
    REPEATED_CHUNK = "repeated_chunk"
    REPEATED_LINE = "repeated_line"
    LOW_NGRAM_DIVERSITY = "low_ngram_diversity"


@dataclass(frozen=True)
class AuditConfig:
    """Audit thresholds (see the module docstring); the defaults are the reference's values.

    The names follow the reference's constants (ref:35-39): a rule fires once a run reaches its
    `max_*` length or a count or share reaches its `min_*` value (`max_char_run=8`: 8 fail).
    Each default and bound is declared here only: the config's `audit` section is this type
    (`config.schema.AuditSettings`).
    """

    max_char_run: int = bounded(8, ge=2)
    max_token_run: int = bounded(8, ge=2)
    min_chunk_tokens: int = bounded(2, ge=1)
    max_chunk_tokens: int = bounded(4, ge=1)
    min_chunk_chars: int = bounded(8, ge=0)
    min_chunk_repeats: int = bounded(4, ge=2)
    min_line_repeats: int = bounded(3, ge=2)
    min_line_share: float = bounded(0.5, ge=0.0, le=1.0)
    min_line_chars: int = bounded(12, ge=0)
    ngram_check: bool = False
    ngram_size: int = bounded(4, ge=1)
    min_words_for_ngram_check: int = bounded(40, ge=0)
    min_unique_ngram_ratio: float = bounded(0.3, ge=0.0, le=1.0)

    def __post_init__(self) -> None:
        check_bounds(self)
        if self.max_chunk_tokens < self.min_chunk_tokens:
            raise FieldError("max_chunk_tokens", "must be >= min_chunk_tokens")


@dataclass(frozen=True)
class AuditResult:
    """`rule` is the first rule that fired (None iff `ok`); `detail` says where or how much."""

    ok: bool
    rule: AuditRule | None
    detail: str


_PASS = AuditResult(True, None, "")


def suspicious_name_keyword(name: str) -> str | None:
    """The first of `SUSPICIOUS_NAME_KEYWORDS` inside a Unicode character name, if any."""
    return next((keyword for keyword in SUSPICIOUS_NAME_KEYWORDS if keyword in name), None)


def _char_label(char: str) -> str:
    return f"U+{ord(char):04X} {unicodedata.name(char, 'UNNAMED')}"


def _suspicious_reason(char: str) -> str | None:
    if char == "\ufffd":
        return "replacement character"
    if ord(char) < 32 or ord(char) == 127:
        return "control character"
    category = unicodedata.category(char)
    if category in _SUSPICIOUS_CATEGORIES:
        return f"category {category}"
    keyword = suspicious_name_keyword(unicodedata.name(char, ""))
    return f"name has {keyword}" if keyword else None


def _suspicious_unicode(text: str, start: int, end: int) -> str | None:
    for match in _MAYBE_SUSPICIOUS.finditer(text, start, end):
        reason = _suspicious_reason(match.group())
        if reason is not None:
            return f"{reason}: {_char_label(match.group())} at {match.start()}"
    return None


def _non_english(text: str, start: int, end: int) -> str | None:
    for match in _NON_ASCII.finditer(text, start, end):
        category = unicodedata.category(match.group())
        if category[0] not in "SPZ":
            return f"{_char_label(match.group())} ({category}) at {match.start()}"
    return None


def _repeated_char_run(collapsed: str, limit: int) -> str | None:
    for match in _CHAR_RUN.finditer(collapsed):
        if len(match.group()) >= limit:
            return f"{match.group(1)!r} x{len(match.group())}"
    return None


def _repeated_token_run(tokens: list[str], limit: int) -> str | None:
    for token, run in itertools.groupby(tokens):
        length = sum(1 for _ in run)
        if length >= limit:
            return f"{token[:80]!r} x{length}"
    return None


def _repeated_chunk(tokens: list[str], config: AuditConfig) -> str | None:
    """The first chunk repeated `min_chunk_repeats` times in a row, in linear time per size.

    The chunk at `start` repeats k times iff each of the size * (k - 1) tokens after it equals
    the token `size` places before it, so one streak count per size finds every such start.
    """
    needed = config.min_chunk_repeats - 1
    for size in range(config.min_chunk_tokens, config.max_chunk_tokens + 1):
        streak = 0
        for index in range(len(tokens) - size):
            streak = streak + 1 if tokens[index] == tokens[index + size] else 0
            start = index - size * needed + 1
            if streak < size * needed:
                continue
            chunk = " ".join(tokens[start : start + size])
            if len(chunk) >= config.min_chunk_chars:
                return f"{chunk[:80]!r} x{config.min_chunk_repeats}"
    return None


def _repeated_line(body: str, config: AuditConfig) -> str | None:
    lines = [line.strip().lower() for line in body.splitlines() if line.strip()]
    counts = Counter(line for line in lines if len(line) >= config.min_line_chars)
    if not counts:
        return None
    line, count = counts.most_common(1)[0]
    if count < config.min_line_repeats or count / len(lines) < config.min_line_share:
        return None
    return f"{count}/{len(lines)} non-blank lines are {line[:80]!r}"


def _low_ngram_diversity(text: str, config: AuditConfig) -> str | None:
    words = _WORD.findall(text.lower())
    size = config.ngram_size
    if len(words) < max(config.min_words_for_ngram_check, size):
        return None
    grams = [tuple(words[i : i + size]) for i in range(len(words) - size + 1)]
    ratio = len(set(grams)) / len(grams)
    if ratio >= config.min_unique_ngram_ratio:
        return None
    return f"{len(set(grams))}/{len(grams)} distinct {size}-grams ({ratio:.2f})"


def _checks(text: str, config: AuditConfig) -> Iterator[tuple[AuditRule, str | None]]:
    """Each rule with its finding, in order, computed only when the previous ones passed."""
    start, end = len(text) - len(text.lstrip()), len(text.rstrip())
    yield AuditRule.SUSPICIOUS_UNICODE, _suspicious_unicode(text, start, end)
    yield AuditRule.NON_ENGLISH, _non_english(text, start, end)
    body = text[start:end]
    collapsed = _SPACES_AND_TABS.sub(" ", body)
    yield AuditRule.REPEATED_CHAR_RUN, _repeated_char_run(collapsed, config.max_char_run)
    tokens = [token.lower() for token in _TOKEN.findall(collapsed)]
    yield AuditRule.REPEATED_TOKEN_RUN, _repeated_token_run(tokens, config.max_token_run)
    yield AuditRule.REPEATED_CHUNK, _repeated_chunk(tokens, config)
    yield AuditRule.REPEATED_LINE, _repeated_line(body, config)
    if config.ngram_check:
        yield AuditRule.LOW_NGRAM_DIVERSITY, _low_ngram_diversity(body, config)


def audit_text(text: str, config: AuditConfig | None = None) -> AuditResult:
    """The first rule that fires on `text` (positions in details index `text`); "" passes."""
    for rule, detail in _checks(text, config or AuditConfig()):
        if detail is not None:
            return AuditResult(False, rule, detail)
    return _PASS
