"""The shared glob parser: syntax, the separator and globstar options, and what is refused."""

from __future__ import annotations

import pytest

from tidecd.base.globs import compile_glob


def matches(pattern: str, value: str, *, separator: str | None = None, globstar: bool = False) -> bool:
    return compile_glob(pattern, separator=separator, globstar=globstar).fullmatch(value) is not None


@pytest.mark.parametrize(("pattern", "value", "expected"), [
    ("*.yaml", "a/b.yaml", True),  # without a separator `*` crosses `/`
    ("*.yaml", "a.yml", False),
    ("?", "/", True),
    ("??", "a", False),
    ("[a-c]x", "bx", True),
    ("[a-c]x", "dx", False),
    ("[!a-c]x", "dx", True),
    ("[!a-c]x", "ax", False),
    ("[]]", "]", True),  # `]` first in a class is a member
    ("[!]]", "a", True),
    ("[!]]", "]", False),
    ("[^a]", "^", True),  # `!` negates, `^` is an ordinary member
    ("[^a]", "b", False),
    ("[a-]", "-", True),
    ("[.]", "x", False),  # regex characters are literal inside a class
    ("[ab", "[ab", True),  # never closed: literal
    ("{a,b{1,2}}.yaml", "b2.yaml", True),
    ("{a,b{1,2}}.yaml", "b.yaml", False),
    ("x{,.bak}", "x", True),  # an empty alternative
    ("a,b", "a,b", True),  # `,` outside braces is literal
    ("a}", "a}", True),  # so is a lone `}`
    ("a\\*", "a*", True),
    ("a\\*", "ab", False),
    ("a\\{b,c}", "a{b,c}", True),
    ("trailing\\", "trailing\\", True),
    ("a.b(c)+", "a.b(c)+", True),  # regex characters are literal
    ("a.b", "axb", False),
    ("", "", True),
])
def test_syntax(pattern: str, value: str, expected: bool) -> None:
    assert matches(pattern, value) is expected


@pytest.mark.parametrize(("pattern", "value", "expected"), [
    ("org/*", "org/repo", True),
    ("org/*", "org/sub/repo", False),
    ("org/?", "org//", False),
    ("org/**", "org/sub/repo", True),
    ("org/***", "org/sub/repo", True),
    ("org/**/repo", "org/repo", False),  # gobwas: `**` is text, the separators around it stay
    ("org/**/repo", "org/a/b/repo", True),
    ("{a,b/c}/*", "b/c/x", True),
])
def test_separator_keeps_single_stars_in_a_segment(pattern: str, value: str, expected: bool) -> None:
    assert matches(pattern, value, separator="/") is expected


@pytest.mark.parametrize(("pattern", "value", "expected"), [
    ("shared/**/*.yaml", "shared/labels.yaml", True),  # no folder at all
    ("shared/**/*.yaml", "shared/a/b/labels.yaml", True),
    ("shared/**/*.yaml", "sharedx/labels.yaml", False),
    ("**/Chart.yaml", "Chart.yaml", True),
    ("**/Chart.yaml", "charts/x/Chart.yaml", True),
    ("shared/**", "shared/a/b", True),
    ("shared/*/x", "shared/a/b/x", False),
])
def test_globstar_lets_double_star_slash_match_no_folder(pattern: str, value: str, expected: bool) -> None:
    assert matches(pattern, value, separator="/", globstar=True) is expected


def test_globstar_needs_a_separator() -> None:
    assert matches("a/**/b", "a/b", globstar=True) is False
    assert matches("a/**/b", "a/x/y/b", globstar=True) is True


def test_another_separator() -> None:
    assert matches("*.example.com", "prod.example.com", separator=".") is True
    assert matches("*.example.com", "k8s.prod.example.com", separator=".") is False
    assert matches("**.example.com", "k8s.prod.example.com", separator=".") is True


def test_newlines_are_ordinary_characters() -> None:
    assert matches("a*b", "a\nb")
    assert matches("a?b", "a\nb", separator="/")


@pytest.mark.parametrize(("pattern", "message"), [
    ("{a,b", "unclosed '{'"),
    ("a{b{c}", "unclosed '{'"),
    ("[z-a]", "bad character range"),
])
def test_invalid_globs_raise_value_error_naming_the_pattern(pattern: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        compile_glob(pattern)
    assert repr(pattern) in str(raised.value)


def test_separator_must_be_one_character() -> None:
    with pytest.raises(ValueError, match="one character"):
        compile_glob("a", separator="::")


def test_compiled_patterns_are_cached() -> None:
    assert compile_glob("cache/*", separator="/") is compile_glob("cache/*", separator="/")
    assert compile_glob("cache/*", separator="/") is not compile_glob("cache/*")
