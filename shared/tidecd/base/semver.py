"""Versions, and the image updater's tags as versions, version constraints and update strategies, all pure.

The one version parser of tidecd: `parse_version` (a tag, a chart version) and `parse_partial` (the version
of a constraint term, wildcards allowed) read versions as Masterminds/semver's `NewVersion` does by default,
which both Argo CD (chart `targetRevision`) and argocd-image-updater use: an optional `v`, missing
minor/patch as 0, leading zeros allowed (CalVer such as `2024.01.15`), dot-separated pre-release and build
identifiers. Comparison is semver 2.0 precedence, by the `semver` package's `Version` (its own `parse`
refuses the `v`, missing parts and leading zeros, so the reading is done here). `source.versions` builds
chart constraints on these two functions; this module builds the updater's.

The updater's constraints are the Masterminds/semver (v3) syntax argocd-image-updater uses: terms joined by
`,` or spaces (all must hold) and `||` (either group); operators `=`, `!=`, `>`, `>=`, `<`, `<=`, `~`, `~>`,
`^`; wildcards `x`, `X`, `*` or missing parts (`1.2` is `1.2.x`); hyphen ranges `1.2 - 1.4.5`. A tag
with a pre-release part (`1.3.0-rc1`) only satisfies a term that itself has one (`1.x-0`), so pre-releases
are opt-in.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import semver

MAX_CONSTRAINT = 256
_IDENTIFIERS = r"[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*"
_PART = r"[0-9]+|[xX*]"
_PARTIAL = re.compile(
    rf"v?(?P<major>{_PART})(?:\.(?P<minor>{_PART}))?(?:\.(?P<patch>{_PART}))?"
    rf"(?:-(?P<pre>{_IDENTIFIERS}))?(?:\+(?P<build>{_IDENTIFIERS}))?")
_OPS = ("!=", ">=", "=>", "<=", "=<", "~>", ">", "<", "=", "~", "^")
_WILD = ("x", "X", "*")
_PARTS = ("major", "minor", "patch")


@dataclass(frozen=True)
class Partial:
    """A version as written, parts that are missing or a wildcard (`x`, `X`, `*`) as None."""

    major: int | None
    minor: int | None
    patch: int | None
    pre: str
    build: str

    @property
    def parts(self) -> tuple[int | None, int | None, int | None]:
        return self.major, self.minor, self.patch


def parse_partial(text: str) -> Partial | None:
    """A version or constraint-term version (`1`, `v1.2`, `1.x`, `*`, `1.2.3-rc.1+b`); None if it is none."""
    match = _PARTIAL.fullmatch(text.strip())
    if match is None:
        return None
    major, minor, patch = (None if match[n] is None or match[n] in _WILD else int(match[n]) for n in _PARTS)
    return Partial(major, minor, patch, match["pre"] or "", match["build"] or "")


def parse_version(text: str) -> semver.Version | None:
    """A tag or chart version as a version, or None when it is not one (such tags are skipped by semver);
    a wildcard is not a version."""
    match = _PARTIAL.fullmatch(text.strip())
    if match is None or any(match[n] in _WILD for n in _PARTS):
        return None
    return semver.Version(int(match["major"]), int(match["minor"] or 0), int(match["patch"] or 0), match["pre"],
                          match["build"])


Check = Callable[[semver.Version], bool]


@dataclass(frozen=True)
class Constraint:
    text: str
    groups: tuple[tuple[Check, ...], ...]

    def allows(self, version: semver.Version) -> bool:
        return any(all(check(version) for check in group) for group in self.groups)


def parse_constraint(text: str) -> Constraint:
    """Raises ValueError with a short reason for a constraint Masterminds would refuse."""
    if len(text) > MAX_CONSTRAINT:
        raise ValueError(f"longer than {MAX_CONSTRAINT} characters")
    groups = []
    for part in text.split("||"):
        terms = _terms(part)
        if not terms:
            raise ValueError("empty constraint")
        groups.append(tuple(terms))
    return Constraint(text, tuple(groups))


def _terms(group: str) -> list[Check]:
    # "1.2 - 1.4.5" is one hyphen range; ">= 1.2" is one term with a space after the operator.
    text = re.sub(r"\s+-\s+", " - ", group.strip())
    text = re.sub(r"(!=|>=|=>|<=|=<|~>|>|<|=|~|\^)\s+", r"\1", text)
    words = [w for w in re.split(r"[\s,]+", text) if w]
    checks: list[Check] = []
    i = 0
    while i < len(words):
        if i + 2 < len(words) and words[i + 1] == "-":
            low, high = _bounds(words[i]), _bounds(words[i + 2])
            checks.append(_range(low.floor, True, high.ceiling_inclusive(), high.pre or low.pre))
            i += 3
            continue
        checks.append(_term(words[i]))
        i += 1
    return checks


@dataclass(frozen=True)
class _Bounds:
    """A term version: the parts given (None = wildcard/missing), pre-release text."""

    parts: tuple[int | None, int | None, int | None]
    pre: str

    @property
    def floor(self) -> semver.Version:
        major, minor, patch = (p or 0 for p in self.parts)
        return semver.Version(major, minor, patch, self.pre or None)

    @property
    def exact(self) -> bool:
        return None not in self.parts

    def next_up(self) -> semver.Version | None:
        """The first version past everything this (partial) version covers; None for `*`."""
        major, minor, patch = self.parts
        if major is None:
            return None
        if minor is None:
            return semver.Version(major + 1, 0, 0)
        if patch is None:
            return semver.Version(major, minor + 1, 0)
        return semver.Version(major, minor, patch + 1)

    def ceiling_inclusive(self) -> tuple[semver.Version | None, bool]:
        return (self.floor, True) if self.exact else (self.next_up(), False)


def _bounds(word: str) -> _Bounds:
    partial = parse_partial(word)
    if partial is None:
        raise ValueError(f"{word!r} is not a version")
    parts: list[int | None] = []
    for value in partial.parts:  # after a wildcard or a missing part, every part is one (`1.x.3` is `1.x`)
        parts.append(None if value is None or (parts and parts[-1] is None) else value)
    return _Bounds((parts[0], parts[1], parts[2]), partial.pre)


def _range(low: semver.Version | None, low_inclusive: bool, high: tuple[semver.Version | None, bool],
           include_pre: str | bool) -> Check:
    upper, upper_inclusive = high

    def check(version: semver.Version) -> bool:
        if version.prerelease and not include_pre:
            return False
        if low is not None and (version < low or (version == low and not low_inclusive)):
            return False
        return not (upper is not None and (version > upper or (version == upper and not upper_inclusive)))

    return check


def _term(word: str) -> Check:
    op = next((o for o in _OPS if word.startswith(o)), "")
    bounds = _bounds(word[len(op):])
    pre = bounds.pre
    major, minor, patch = bounds.parts
    if op in ("", "="):
        return _range(bounds.floor, True, bounds.ceiling_inclusive(), pre)
    if op == "!=":
        inside = _range(bounds.floor, True, bounds.ceiling_inclusive(), True)
        return lambda v: (not v.prerelease or bool(pre)) and not inside(v)
    if op in (">=", "=>"):
        return _range(bounds.floor, True, (None, False), pre)
    if op == ">":
        if bounds.exact:
            return _range(bounds.floor, False, (None, False), pre)
        return _range(bounds.next_up(), True, (None, False), pre)
    if op == "<":
        return _range(None, True, (bounds.floor, False), pre)
    if op in ("<=", "=<"):
        return _range(None, True, bounds.ceiling_inclusive(), pre)
    if op in ("~", "~>"):
        if major is None:
            return _range(None, True, (None, False), pre)
        upper = semver.Version(major + 1, 0, 0) if minor is None else semver.Version(major, minor + 1, 0)
        return _range(bounds.floor, True, (upper, False), pre)
    # "^": the left-most non-zero part may not change
    if major is None:
        return _range(None, True, (None, False), pre)
    if major > 0 or minor is None:
        upper = semver.Version(major + 1, 0, 0)
    elif minor > 0 or patch is None:
        upper = semver.Version(0, minor + 1, 0)
    else:
        upper = semver.Version(0, 0, patch + 1)
    return _range(bounds.floor, True, (upper, False), pre)


# --- strategies ----------------------------------------------------------------------------------------


def newest_semver(tags: Iterable[str], constraint: Constraint | None) -> str | None:
    """The tag with the highest version the constraint allows (no constraint: no pre-releases)."""
    best: tuple[semver.Version, str] | None = None
    for tag in tags:
        version = parse_version(tag)
        if version is None:
            continue
        if constraint is not None and not constraint.allows(version):
            continue
        if constraint is None and version.prerelease:
            continue
        # equal precedence (1.2 and v1.2.0): the lexically greater tag wins, so the answer is stable
        if best is None or version > best[0] or (version == best[0] and tag > best[1]):
            best = (version, tag)
    return best[1] if best else None


def alphabetical(tags: Iterable[str]) -> str | None:
    ordered = sorted(tags)
    return ordered[-1] if ordered else None


def newest_build(created: Mapping[str, str]) -> str | None:
    """The tag whose image was built last (RFC 3339 times); ties go to the lexically greatest tag."""
    if not created:
        return None
    return max(created.items(), key=lambda item: (_sortable_time(item[1]), item[0]))[0]


def _sortable_time(text: str) -> str:
    """RFC 3339 text compared as UTC: normalise `Z`, offsets and fractions so strings sort as times."""
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return ""
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
