"""Chart versions and `targetRevision` constraints, read the way helm and Argo CD read them.

Argo CD resolves a chart's `targetRevision` with Masterminds/semver constraints: `17.x`, `~1.2`, `^0.3.1`,
`>=1.0 <2.0`, `1.2 - 1.4`, `a || b`, `*`, or an exact version. Versions and the versions of constraint
terms are read by tidecd's one version parser (`base.semver.parse_version` and `parse_partial`: a leading
`v` and missing minor/patch parts are accepted) and compared by the `semver` package; this module turns each
constraint into lower and upper bounds on them. As in Masterminds, pre-releases match only when the
constraint itself names a pre-release.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import semver

from tidecd.base.errors import ConfigError
from tidecd.base.semver import parse_partial
from tidecd.base.semver import parse_version as parse_version  # the one parser, also read from here

_COMPARATOR = re.compile(r"^(?P<op>!=|>=|=>|<=|=<|>|<|=|~>|~|\^)?\s*(?P<version>\S+)$")

Check = Callable[[semver.Version], bool]


class BadConstraint(ConfigError):
    """Not a version or a semver constraint (callers name the field)."""


def _bounds(op: str, text: str) -> list[Check]:
    partial = parse_partial(text)
    if partial is None:
        raise BadConstraint(f"{text!r} is not a version")
    major, minor, patch = partial.parts
    if major is None:
        return [] if op in ("", "=", ">=", "=>", "<=", "=<", "~", "~>", "^") else [lambda v: False]
    pre = partial.pre or None
    low = semver.Version(major, minor or 0, patch or 0, pre)
    if minor is None:
        next_up = semver.Version(major + 1, 0, 0)
    elif patch is None:
        next_up = semver.Version(major, minor + 1, 0)
    else:
        next_up = low
    wildcard = minor is None or patch is None
    if op in ("", "="):
        if not wildcard:
            return [lambda v: v.compare(low) == 0]
        return [lambda v: v >= low, lambda v: v < next_up]
    if op == "!=":
        if not wildcard:
            return [lambda v: v.compare(low) != 0]
        return [lambda v: v < low or v >= next_up]
    if op == ">":
        return [lambda v: v >= next_up] if wildcard else [lambda v: v > low]
    if op in (">=", "=>"):
        return [lambda v: v >= low]
    if op == "<":
        return [lambda v: v < low]
    if op in ("<=", "=<"):
        return [lambda v: v < next_up] if wildcard else [lambda v: v <= low]
    if op in ("~", "~>"):
        upper = semver.Version(major + 1, 0, 0) if minor is None else semver.Version(major, minor + 1, 0)
        return [lambda v: v >= low, lambda v: v < upper]
    if op == "^":
        if major > 0 or minor is None:
            upper = semver.Version(major + 1, 0, 0)
        elif minor > 0 or patch is None:
            upper = semver.Version(0, minor + 1, 0)
        else:
            upper = semver.Version(0, 0, (patch or 0) + 1)
        return [lambda v: v >= low, lambda v: v < upper]
    raise BadConstraint(f"unknown operator {op!r}")


def _group(text: str) -> tuple[list[Check], bool]:
    """One AND group (comparators separated by spaces or commas); whether it names a pre-release."""
    text = re.sub(r"\s+-\s+", " - ", text.strip())
    tokens = [t for t in re.split(r"[\s,]+", text) if t]
    checks: list[Check] = []
    pre = False
    i = 0
    while i < len(tokens):
        if i + 2 < len(tokens) and tokens[i + 1] == "-":  # hyphen range
            checks += _bounds(">=", tokens[i]) + _bounds("<=", tokens[i + 2])
            pre = pre or "-" in tokens[i] or "-" in tokens[i + 2]
            i += 3
            continue
        token = tokens[i]
        if token in ("=", "!=", ">", "<", ">=", "<=", "~", "^", "~>", "=>", "=<") and i + 1 < len(tokens):
            token, i = token + tokens[i + 1], i + 1  # `>= 1.2`
        match = _COMPARATOR.match(token)
        if match is None:
            raise BadConstraint(f"{token!r} is not a version constraint")
        checks += _bounds(match.group("op") or "", match.group("version"))
        pre = pre or "-" in match.group("version").lstrip("v")
        i += 1
    return checks, pre


def matcher(constraint: str) -> Callable[[semver.Version], bool]:
    """A predicate for `constraint`; BadConstraint when it is not one."""
    groups = [_group(part) for part in constraint.split("||")]

    def matches(version: semver.Version) -> bool:
        for checks, allows_pre in groups:
            if version.prerelease and not allows_pre:
                continue
            if all(check(version) for check in checks):
                return True
        return False

    return matches


def best_version(candidates: Iterable[str], constraint: str) -> str | None:
    """The highest candidate matching `constraint` (an exact candidate string always matches itself)."""
    candidates = list(candidates)
    target = constraint.strip() or "*"
    if target in candidates and target not in ("*", "latest"):
        return target
    if target == "latest":
        target = "*"
    matches = matcher(target)
    best: tuple[semver.Version, str] | None = None
    for text in candidates:
        version = parse_version(text)
        if version is not None and matches(version) and (best is None or version > best[0]):
            best = (version, text)
    return best[1] if best else None
