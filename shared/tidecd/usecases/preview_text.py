"""A preview's result and the pull-request comment made of it (pure: no I/O).

`AppPreview` is one app's preview of one head, as the job stores it (`previews/.../apps/<app>.json`);
`render_comment` turns every result of a head into the PR's one comment, `render_waiting` is the note a
fork's pull request gets until a maintainer asks (`tidecd.usecases.forks`). Kept apart from the use case
(`tidecd.usecases.preview`) so the text can be read and tested without a runtime. Anything a fork's files
can put into the comment (a render error) is made inert (`plain`); diffs are fenced.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidecd.base.model import ResourceKey, SyncStatus
from tidecd.clients import github as gh
from tidecd.diff import ResourceDiff
from tidecd.state.plans import AppPlan
from tidecd.usecases import forks
from tidecd.usecases.forks import Mode

MAX_DIFF_CHARS = 12_000  # one object's diff in the comment
COMMENT_BUDGET = gh.COMMENT_LIMIT - 600  # room for the truncation note and the footer


@dataclass(frozen=True)
class AppPreview:
    app: str
    head_sha: str
    created: tuple[ResourceDiff, ...] = ()
    changed: tuple[ResourceDiff, ...] = ()
    deleted: tuple[ResourceDiff, ...] = ()
    errors: tuple[str, ...] = ()  # render errors, dry-run failures
    violations: tuple[str, ...] = ()  # project rules
    taken: tuple[ResourceKey, ...] = ()  # live objects no app owns that a sync would take over (never shown)
    mode: str = Mode.FULL.value
    base: str = ""  # a fork's preview: the base revision its head was compared with ("" when none)
    hooks: tuple[str, ...] = ()  # the hooks a sync would run ("PreSync Job/ns/migrate")
    held: str = ""  # the sync window that would hold an automated sync now ("" when none)
    plan: AppPlan | None = None  # what the sync checks when the app requires a plan (`tidecd.state.plans`)

    @property
    def failed(self) -> bool:
        return bool(self.errors or self.violations)

    def summary(self) -> str:
        if self.violations:
            return f"{len(self.violations)} project-rule violation(s)"
        if self.errors:
            return f"{len(self.errors)} error(s)"
        text = f"{len(self.created)} to create, {len(self.changed)} to change, {len(self.deleted)} to delete"
        return text + (f", {len(self.taken)} to take over" if self.taken else "")

    def to_json(self) -> dict[str, Any]:
        def diffs(items: tuple[ResourceDiff, ...]) -> list[dict[str, Any]]:
            return [{"key": d.key.to_dict(), "changed": list(d.changed_paths), "text": d.text, "error": d.error}
                    for d in items]

        return {"app": self.app, "head_sha": self.head_sha, "created": diffs(self.created),
                "changed": diffs(self.changed), "deleted": diffs(self.deleted), "errors": list(self.errors),
                "violations": list(self.violations), "taken": [k.to_dict() for k in self.taken],
                "mode": self.mode, "base": self.base, "hooks": list(self.hooks), "held": self.held,
                "plan": self.plan.to_json() if self.plan is not None else None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AppPreview:
        def diffs(name: str) -> tuple[ResourceDiff, ...]:
            return tuple(ResourceDiff(ResourceKey.from_dict(d["key"]), SyncStatus.OUT_OF_SYNC,
                                      tuple(d.get("changed", ())), str(d.get("text", "")),
                                      name == "deleted", str(d.get("error", "")))
                         for d in data.get(name, []))

        plan = data.get("plan")
        return cls(str(data["app"]), str(data["head_sha"]), diffs("created"), diffs("changed"), diffs("deleted"),
                   tuple(data.get("errors", ())), tuple(data.get("violations", ())),
                   tuple(ResourceKey.from_dict(k) for k in data.get("taken", ())),
                   str(data.get("mode", Mode.FULL.value)), str(data.get("base", "")),
                   tuple(str(h) for h in data.get("hooks") or ()), str(data.get("held") or ""),
                   AppPlan.from_json(plan) if isinstance(plan, Mapping) else None)


def comment_marker(repo: gh.Repo, number: int) -> str:
    return gh.marker("preview", f"{repo.full_name}#{number}")


# --- the comment (pure) ----------------------------------------------------------------------------------


@dataclass
class Budget:
    left: int
    cut: int = 0
    parts: list[str] = field(default_factory=list)

    def add(self, text: str) -> bool:
        if len(text) > self.left:
            self.cut += 1
            return False
        self.parts.append(text)
        self.left -= len(text)
        return True


def plain(text: str, limit: int = 600) -> str:
    """Text from a render or an API error as one inert line of the comment: no HTML, no @mention (a
    fork's files can put any text into a render error), cut to `limit`."""
    flat = " ".join(text.split())
    return gh.cut(html.escape(flat, quote=False).replace("@", "@\u200b"), limit)


FOOTERS = {
    Mode.FULL.value: "Rendered at the PR head and compared with the live cluster by server-side dry-run; "
                     "nothing was applied. Live objects no app owns are never shown. Secret values are masked.",
    Mode.FORK.value: "A fork's pull request, previewed because a maintainer asked: rendered at the PR head "
                     "without any credential (SealedSecrets stay sealed) and compared with the rendered "
                     "manifests of the base's last rendered revision. The cluster was not read. Secret values "
                     "are masked.",
}


def render_comment(repo: gh.Repo, number: int, head_sha: str, results: Mapping[str, AppPreview | None],
                   limit: int = COMMENT_BUDGET, mode: str = Mode.FULL.value) -> str:
    title = f"### tidecd preview of `{head_sha[:12]}`" + (" (fork: rendered only)" if mode == Mode.FORK.value else "")
    budget = Budget(limit)
    budget.add(f"{comment_marker(repo, number)}\n{title}\n")
    app_sections(budget, results)
    return finish(budget, FOOTERS.get(mode, FOOTERS[Mode.FULL.value]))


def finish(budget: Budget, footer: str) -> str:
    """The comment's end: what was left out to stay under GitHub's limit, then the footer."""
    if budget.cut:
        budget.parts.append(f"\n> ⚠️ {budget.cut} section(s) left out: the comment would exceed GitHub's "
                            f"{gh.COMMENT_LIMIT:,} characters. See the dashboard for every diff.\n")
    budget.parts.append(f"\n<sub>{footer}</sub>\n")
    return "".join(budget.parts)


def app_sections(budget: Budget, results: Mapping[str, AppPreview | None]) -> None:
    """The table of apps, then each app's section and its diffs, as long as the budget lasts."""
    head = ["", "| App | Result | Create | Change | Delete |", "|---|---|---|---|---|"]
    for name, res in results.items():
        if res is None:
            head.append(f"| `{name}` | ⏳ pending | | | |")
        else:
            mark = "❌" if res.failed else "✅"
            head.append(f"| `{name}` | {mark} {res.summary()} | {len(res.created)} | {len(res.changed)} "
                        f"| {len(res.deleted)} |")
    budget.add("\n".join(head) + "\n")
    for name, res in results.items():
        if res is None:
            continue
        lines = [f"\n#### `{name}`\n"]
        if res.mode == Mode.FORK.value and not res.failed:
            lines.append(f"- compared with the base's rendered revision `{res.base[:12]}`\n" if res.base else
                         "- the app has no rendered revision yet: every object is shown as new\n")
        lines += [f"- ❌ project rule: {plain(v)}\n" for v in res.violations]
        lines += [f"- ❌ {plain(e)}\n" for e in res.errors]
        for verb, items in (("create", res.created), ("change", res.changed), ("delete", res.deleted)):
            if items:
                lines.append(f"- {verb}: " + ", ".join(f"`{d.key}`" for d in items) + "\n")
        if res.taken:
            lines.append("- take over (live, and no app owns it: its live state is not shown): "
                         + ", ".join(f"`{k}`" for k in res.taken) + "\n")
        if res.hooks:
            lines.append("- hooks a sync would run: " + ", ".join(f"`{plain(h, 200)}`" for h in res.hooks) + "\n")
        if res.held:
            lines.append(f"- ⏸ held by a sync window now: {plain(res.held)}\n")
        if not budget.add("".join(lines)):
            continue
        for verb, items in (("created", res.created), ("changed", res.changed), ("deleted", res.deleted)):
            for d in items:
                budget.add(details(f"{verb}: <code>{d.key}</code>", d.text))


def details(summary: str, diff: str) -> str:
    """A folded, fenced diff (cut to MAX_DIFF_CHARS)."""
    text = gh.cut(diff, MAX_DIFF_CHARS, "\n… (diff cut)\n")
    return f"<details><summary>{summary}</summary>\n\n```diff\n{text.replace('```', '` ` `')}\n```\n</details>\n"


def render_waiting(repo: gh.Repo, number: int, head_repo: str, policy: forks.Policy, apps: Sequence[str]) -> str:
    """The one note a fork's pull request gets until a maintainer asks (Prow's `needs-ok-to-test` comment):
    who may ask, how, and what an approved preview does and does not do. No commit status is posted."""
    where = f"the fork `{plain(head_repo, 200)}`" if head_repo else "a fork that no longer exists"
    shown = ", ".join(f"`{a}`" for a in apps[:20]) + (f" and {len(apps) - 20} more" if len(apps) > 20 else "")
    return (f"{comment_marker(repo, number)}\n### tidecd preview: waiting for a maintainer\n\n"
            f"This pull request comes from {where}. tidecd previews a fork's pull request only when a "
            "maintainer asks, so nothing was rendered and no commit status was posted. To ask:\n"
            f"- add the label `{policy.label}`: every push is previewed while it stays on, or\n"
            f"- comment `{policy.command}` on its own line (an OWNER, MEMBER or COLLABORATOR of this "
            "repository): the head of that moment is previewed once.\n\n"
            "A fork's preview renders without any credential and is compared with the rendered manifests of "
            "the base branch, never with the cluster.\n\n"
            f"Apps this pull request can affect: {shown}.\n")
