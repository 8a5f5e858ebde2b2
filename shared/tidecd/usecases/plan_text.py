"""The config source's plan and its pull-request comment (pure: no I/O).

`ConfigPlan` is what `tidecd.usecases.plan` computes for a pull request to the config source, as stored
(`previews/<owner>/<repo>/<n>/plan.json`); `render_plan` turns it into the pull request's one plan comment:
the apps added, removed and changed, each change of spec, then each planned app's section as the preview
shows it (`preview_text.app_sections`: rendered diff per object, dry-run refusals, project rules, sync
windows, hooks). Text from the config (errors) is made inert (`preview_text.plain`); diffs are fenced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidecd.clients import github as gh
from tidecd.usecases.preview_text import COMMENT_BUDGET, AppPreview, Budget, app_sections, details, finish, plain

FOOTER = ("The config source at the PR head (its ApplicationSets evaluated), each added or changed app rendered "
          "and compared with the live cluster by server-side dry-run; nothing was applied. Apps that require a "
          "plan (`tidecd.io/require-plan`) sync after the merge only what this plan shows, and only while the "
          "live objects it was computed against have not moved. Secret values are masked.")


@dataclass(frozen=True)
class ConfigPlan:
    head_sha: str
    added: tuple[str, ...] = ()
    removed: tuple[tuple[str, tuple[str, ...]], ...] = ()  # app → the objects it owns (its state's inventory)
    changed: tuple[tuple[str, str], ...] = ()  # app → its spec diff
    results: tuple[AppPreview, ...] = ()  # each planned app's preview under the head's config
    cut: int = 0  # added or changed apps not planned (MAX_PLAN_APPS)
    errors: tuple[str, ...] = ()  # the head's config: invalid apps, problems, or why it could not be planned

    @property
    def failed(self) -> bool:
        return bool(self.errors) or any(r.failed for r in self.results)

    def summary(self) -> str:
        text = f"{len(self.added)} app(s) added, {len(self.changed)} changed, {len(self.removed)} removed"
        bad = len(self.errors) + sum(1 for r in self.results if r.failed)
        return text + (f"; {bad} problem(s)" if bad else "") + (f"; {self.cut} not planned" if self.cut else "")

    def to_json(self) -> dict[str, Any]:
        return {"head_sha": self.head_sha, "added": list(self.added),
                "removed": [{"app": a, "objects": list(o)} for a, o in self.removed],
                "changed": [{"app": a, "diff": d} for a, d in self.changed],
                "results": [r.to_json() for r in self.results], "cut": self.cut, "errors": list(self.errors)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ConfigPlan:
        return cls(str(data.get("head_sha") or ""), tuple(str(a) for a in data.get("added") or ()),
                   tuple((str(r["app"]), tuple(str(o) for o in r.get("objects") or ()))
                         for r in data.get("removed") or ()),
                   tuple((str(c["app"]), str(c.get("diff") or "")) for c in data.get("changed") or ()),
                   tuple(AppPreview.from_json(r) for r in data.get("results") or ()), int(data.get("cut") or 0),
                   tuple(str(e) for e in data.get("errors") or ()))


def plan_marker(repo: gh.Repo, number: int) -> str:
    return gh.marker("plan", f"{repo.full_name}#{number}")


def render_plan(repo: gh.Repo, number: int, plan: ConfigPlan, limit: int = COMMENT_BUDGET) -> str:
    budget = Budget(limit)
    lines = [plan_marker(repo, number), f"### tidecd plan of the config source at `{plan.head_sha[:12]}`", "",
             f"**{plan.summary()}**", ""]
    lines += [f"- ❌ {plain(e)}" for e in plan.errors]
    lines += [f"- ➕ new app `{a}`" for a in plan.added]
    lines += [f"- ✏️ changed app `{a}`" for a, _ in plan.changed]
    for app, objects in plan.removed:
        owned = ", ".join(f"`{o}`" for o in objects) if objects else "no object recorded"
        lines.append(f"- ➖ removed app `{app}` (owns {owned}; deleted with the app only if it has the "
                     "resources finalizer)")
    if plan.cut:
        lines.append(f"- ⚠️ {plan.cut} added or changed app(s) not planned: a plan covers at most "
                     f"{len(plan.results)} apps. Split the pull request to see every one.")
    budget.add("\n".join(lines) + "\n")
    for app, diff in plan.changed:
        budget.add(details(f"spec of <code>{app}</code>", diff))
    if plan.results:
        app_sections(budget, {r.app: r for r in plan.results})
    return finish(budget, FOOTER)
