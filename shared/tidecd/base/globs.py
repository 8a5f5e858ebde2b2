"""Globs compiled to regular expressions: one parser for every place tidecd matches a user's pattern.

AppProject rules (`project`), a directory app's include/exclude (`render.directory`) and the webhook's
`manifest-generate-paths` (`webhook`) all read Argo CD globs, with small differences in what `*` and `**`
may cross. They share this parser and differ only in the options they pass, so the syntax is fixed once.

Syntax: `*` any run of characters, `?` one character, `**` any run across separators too, `[a-z]` /
`[!a-z]` a class (a `]` right after `[` or `[!` is a member), `{a,b}` alternatives (nestable, may be
empty), `\\x` a literal x. Everything else is literal, so are `,` and `}` outside braces and a `[` that
is never closed.

Options:
- `separator` (one character): `*` and `?` stay within one segment and only `**` crosses a separator,
  as gobwas/glob with separators (sourceRepos). None: `*` crosses too (gobwas without, include/exclude).
- `globstar`: `**` followed by the separator also stands for no folder at all, so `a/**/b` matches `a/b`
  (doublestar and .gitignore style, the manifest-generate-paths rule).

An unclosed `{` or an impossible class (`[z-a]`) raises ValueError; each caller decides what that means.
"""

from __future__ import annotations

import re
from functools import lru_cache


@lru_cache(maxsize=1024)
def glob_match(pattern: str, value: str) -> bool:
    """Whether `value` matches the glob `pattern` whole; a pattern that does not compile matches only itself."""
    if pattern == value or pattern == "*":
        return True
    try:
        return compile_glob(pattern).fullmatch(value) is not None
    except ValueError:
        return False


def compile_glob(pattern: str, *, separator: str | None = None, globstar: bool = False) -> re.Pattern[str]:
    """The regex that `fullmatch`es exactly the strings `pattern` matches (see the module docstring)."""
    if separator is not None and len(separator) != 1:
        raise ValueError(f"glob separator must be one character, not {separator!r}")
    try:
        return re.compile(_translate(pattern, separator, globstar), re.DOTALL)
    except re.error as exc:
        raise ValueError(f"glob {pattern!r}: {exc.msg}") from exc


def _translate(pattern: str, separator: str | None, globstar: bool) -> str:
    one = "." if separator is None else f"[^{re.escape(separator)}]"
    out: list[str] = []
    depth = i = 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if globstar and separator is not None and pattern.startswith(separator, i):
                out.append(f"(?:.*{re.escape(separator)})?")  # any number of folders, none included
                i += 1
            else:
                out.append(".*")
            continue
        if char == "*":
            out.append(one + "*")
        elif char == "?":
            out.append(one)
        elif char == "[" and (klass := _char_class(pattern, i)) is not None:
            text, i = klass
            out.append(text)
        elif char == "{":
            depth += 1
            out.append("(?:")
        elif char == "}" and depth:
            depth -= 1
            out.append(")")
        elif char == "," and depth:
            out.append("|")
        elif char == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(char))
        i += 1
    if depth:
        raise ValueError(f"glob {pattern!r}: unclosed '{{'")
    return "".join(out)


def _char_class(pattern: str, start: int) -> tuple[str, int] | None:
    """The class opened at `start` as a regex and the index of its `]`; None when it is never closed."""
    negate = pattern.startswith("!", start + 1)
    first = start + 1 + negate
    end = pattern.find("]", first + 1)
    if end < 0:
        return None
    body = pattern[first:end]
    members: list[str] = []
    j = 0
    while j < len(body):
        if j + 2 < len(body) and body[j + 1] == "-":  # a range a-z
            members.append(f"{re.escape(body[j])}-{re.escape(body[j + 2])}")
            j += 3
        else:
            members.append(re.escape(body[j]))
            j += 1
    return f"[{'^' if negate else ''}{''.join(members)}]", end
