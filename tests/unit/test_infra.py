"""Static checks of infra/: formatting, and the wiring the functions rely on, read from the parsed HCL.

Terraform cannot plan here (no provider download, no cloud), so these tests read every `.tf` file with
python-hcl2 and interpret the few expression shapes the module uses. Each check is a pure function from
the parsed module to a list of problems; the negative tests run the same checks on a broken copy, which
proves each one can fail. An expression the interpreter does not know is itself a problem, so a
refactor of infra/ that changes the wiring's shape fails loudly here instead of passing unchecked.
"""

from __future__ import annotations

import ast
import copy
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hcl2
import pytest
from hcl2.utils import SerializationOptions

from tidecd.clients.tools import binary
from tidecd.usecases import registry_events

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
EXAMPLE = INFRA / "examples" / "basic"
MAIN_PY = ROOT / "functions" / "main.py"

FUNCTIONS = ("webhook", "poll", "images", "reconcile", "api")

# What each function reads (DESIGN.md section 8): env var -> Secret Manager secret. A secret may reach the
# function as a secret env var, or as a mounted volume whose path is the env var's value.
REQUIRED_SECRETS: dict[str, dict[str, str]] = {
    "webhook": {"TIDECD_WEBHOOK_SECRET": "webhook-secret",
                "TIDECD_SEALING_KEYS": "sealing-keys"},  # a registry notification runs the image updater
    "poll": {"TIDECD_SEALING_KEYS": "sealing-keys"},
    "images": {"TIDECD_SEALING_KEYS": "sealing-keys"},
    "reconcile": {"TIDECD_SEALING_KEYS": "sealing-keys"},
    "api": {"TIDECD_API_TOKEN": "api-token", "TIDECD_API_READONLY_TOKEN": "api-readonly-token",
            "TIDECD_SEALING_KEYS": "sealing-keys"},
}
REQUIRED_ENV = ("TIDECD_CONFIG", "TIDECD_STORE", "TIDECD_REFRESH_TOPIC", "TIDECD_BIN_DIR")

BROAD_ROLES = {"roles/owner", "roles/editor", "roles/viewer", "roles/iam.securityAdmin"}
# The only for_each a grant to allUsers may use: the functions marked public in local.functions.
PUBLIC_FUNCTIONS = "${local.public_functions}"
# allowed at project level; container.clusterViewer only on gke_projects, for reconcile (check_gke)
PROJECT_ROLES = {"roles/logging.logWriter", "roles/storage.objectViewer", "roles/container.clusterViewer"}

# A stand-in for functions/main.py with the contract the Terraform needs, for the negative tests.
MAIN_FIXTURE = '''
import functions_framework

@functions_framework.http
def webhook(request): ...

@functions_framework.http
def poll(request): ...

@functions_framework.http
def images(request): ...

@functions_framework.cloud_event
def reconcile(event): ...

@functions_framework.http
def api(request): ...

def _helper(): ...
'''

Module = dict[str, Any]


class Unreadable(Exception):
    """An expression shape this test's interpreter does not know."""


# -- loading -------------------------------------------------------------------------------------


def load_module(directory: Path) -> Module:
    """Every .tf file of one module, merged: {"resource": {type: {name: body}}, "locals": {...}, ...}."""
    options = SerializationOptions(with_comments=False, explicit_blocks=False, strip_string_quotes=True)
    module: Module = {"resource": {}, "data": {}, "locals": {}, "variable": {}, "output": {}, "module": {}}
    for path in sorted(directory.glob("*.tf")):
        with path.open() as f:
            parsed = hcl2.load(f, serialization_options=options)
        for block in parsed.get("locals", []):
            module["locals"].update(block)
        for kind in ("resource", "data"):
            for block in parsed.get(kind, []):
                for rtype, named in block.items():
                    module[kind].setdefault(rtype, {}).update(named)
        for kind in ("variable", "output", "module"):
            for block in parsed.get(kind, []):
                module[kind].update(block)
    return module


@pytest.fixture(scope="module")
def tf() -> Module:
    return load_module(INFRA)


def one(blocks: Any, what: str) -> dict[str, Any]:
    """The single nested block of a list of blocks (hcl2 gives nested blocks as lists)."""
    if not isinstance(blocks, list) or len(blocks) != 1:
        raise Unreadable(f"{what}: expected exactly one block, got {blocks!r}")
    block: dict[str, Any] = blocks[0]
    return block


def top_level_functions(source: str) -> dict[str, list[str]]:
    """Top-level function name -> the last name of each decorator (`functions_framework.cloud_event`)."""
    found: dict[str, list[str]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names = []
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                names.append(target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", ""))
            found[node.name] = names
    return found


# -- interpreting the function table -------------------------------------------------------------


@dataclass(frozen=True)
class Wiring:
    """What one deployed function gets, as Terraform would build it."""

    entry_point: str
    public: bool
    ingress: str
    service_account: str
    env: dict[str, str] = field(default_factory=dict)
    env_secrets: dict[str, str] = field(default_factory=dict)  # env var -> secret
    mounts: dict[str, str] = field(default_factory=dict)  # mount path -> secret


def evaluate(expr: Any, row: dict[str, Any], key: str, tf: Module) -> Any:
    """Evaluate the expression shapes the function resource uses, for one row of local.functions."""
    if not isinstance(expr, str) or "${" not in expr:
        return expr
    if m := re.fullmatch(r"\$\{each\.value\.(\w+)\}", expr):
        return row[m.group(1)]
    if expr == "${each.key}":
        return key
    if m := re.fullmatch(r"\$\{local\.(\w+)\}", expr):
        return tf["locals"][m.group(1)]
    if m := re.fullmatch(r"\$\{each\.value\.(\w+) \? (.+) : (.+)\}", expr):
        chosen = m.group(2) if row[m.group(1)] else m.group(3)
        return literal(chosen)
    raise Unreadable(f"cannot evaluate {expr!r}")


def literal(text: str) -> Any:
    if m := re.fullmatch(r'"([^"]*)"', text):
        return m.group(1)
    if m := re.fullmatch(r"\[(.*)\]", text):
        return [literal(item.strip()) for item in m.group(1).split(",") if item.strip()]
    raise Unreadable(f"not a literal: {text!r}")


SECRET_REF = r"\$\{google_secret_manager_secret\.this\[(?:(\w+)\.value|\"([\w-]+)\")\]\.secret_id\}"


def secret_of(expr: str, iterator: str, item: Any) -> str:
    """The secret key a `secret = ...` expression names, given the dynamic block's current item."""
    m = re.fullmatch(SECRET_REF, expr)
    if not m:
        raise Unreadable(f"secret reference {expr!r}")
    if m.group(2):
        return m.group(2)
    if m.group(1) != iterator:
        raise Unreadable(f"{expr!r} does not use the iterator {iterator}")
    return str(item)


def environment(expr: Any, row: dict[str, Any], tf: Module) -> dict[str, str]:
    """environment_variables: a literal map, local.common_env, or merge(common, cond ? {K = local.L} : {})."""
    if isinstance(expr, dict):
        return dict(expr)
    if expr == "${local.common_env}":
        return dict(tf["locals"]["common_env"])
    pattern = r"\$\{merge\(local\.common_env, each\.value\.(\w+) \? \{(\w+) = local\.(\w+)\} : \{\}\)\}"
    m = re.fullmatch(pattern, expr)
    if not m:
        raise Unreadable(f"environment_variables {expr!r}")
    env = dict(tf["locals"]["common_env"])
    if row[m.group(1)]:
        env[m.group(2)] = tf["locals"][m.group(3)]
    return env


def function_wiring(tf: Module) -> dict[str, Wiring]:
    """Each function's deployed configuration, from google_cloudfunctions2_function and local.functions."""
    resources = tf["resource"].get("google_cloudfunctions2_function", {})
    if list(resources) != ["this"] or resources["this"].get("for_each") != "${local.functions}":
        raise Unreadable("expected one google_cloudfunctions2_function `this` with for_each = local.functions")
    body = resources["this"]
    build = one(body["build_config"], "build_config")
    service = one(body["service_config"], "service_config")
    wiring = {}
    for key, row in tf["locals"]["functions"].items():
        env_secrets: dict[str, str] = {}
        mounts: dict[str, str] = {}
        for block in service.get("secret_environment_variables", []):
            env_secrets[block["key"]] = secret_of(block["secret"], "", None)
        for block in service.get("secret_volumes", []):
            mounts[evaluate(block["mount_path"], row, key, tf)] = secret_of(block["secret"], "", None)
        for dynamic in service.get("dynamic", []):
            for name, spec in dynamic.items():
                items = evaluate(spec["for_each"], row, key, tf)
                content = one(spec["content"], f"dynamic {name} content")
                if name == "secret_environment_variables":
                    if content["key"] != f"${{{name}.key}}":
                        raise Unreadable(f"dynamic {name} key {content['key']!r}")
                    for env, secret in items.items():
                        env_secrets[env] = secret_of(content["secret"], name, secret)
                elif name == "secret_volumes":
                    for item in items:
                        path = evaluate(content["mount_path"], row, key, tf)
                        mounts[path] = secret_of(content["secret"], name, item)
        wiring[key] = Wiring(
            entry_point=evaluate(build["entry_point"], row, key, tf),
            public=bool(row.get("public")),
            ingress=evaluate(service.get("ingress_settings"), row, key, tf),
            service_account=service.get("service_account_email", "").replace("each.key", key),
            env=environment(service.get("environment_variables", {}), row, tf),
            env_secrets=env_secrets,
            mounts=mounts,
        )
    return wiring


# -- the checks ----------------------------------------------------------------------------------


def cron_minutes(schedule: str) -> set[int] | None:
    """Minutes a cron schedule fires at when it fires every hour of every day, else None."""
    fields = schedule.split()
    if len(fields) != 5 or fields[1:] != ["*"] * 4:
        return None
    minutes: set[int] = set()
    for part in fields[0].split(","):
        m = re.fullmatch(r"(\*|(\d+)(?:-(\d+))?)(?:/(\d+))?", part)
        if not m:
            return None
        start = 0 if m.group(1) == "*" else int(m.group(2))
        end = 59 if m.group(1) == "*" else int(m.group(3) or (59 if m.group(4) else m.group(2)))
        minutes.update(range(start, end + 1, int(m.group(4) or 1)))
    return minutes


# Which function each Cloud Scheduler job calls, and every how many minutes.
SCHEDULES = {"poll": 3, "images": 2}


def check_schedule(tf: Module) -> list[str]:
    jobs = tf["resource"].get("google_cloud_scheduler_job", {})
    if set(jobs) != set(SCHEDULES):
        return [f"expected google_cloud_scheduler_job {sorted(SCHEDULES)}, found {sorted(jobs)}"]
    problems = []
    for name, job in sorted(jobs.items()):
        every = SCHEDULES[name]
        if cron_minutes(job.get("schedule", "")) != set(range(0, 60, every)):
            problems.append(f"google_cloud_scheduler_job.{name}: schedule {job.get('schedule')!r} is not every "
                            f"{every} min")
        target = one(job.get("http_target"), "http_target")
        if not re.search(rf'google_cloudfunctions2_function\.this\["{name}"\]', target.get("uri", "")):
            problems.append(f"google_cloud_scheduler_job.{name}: uri {target.get('uri')!r} is not {name}'s URL")
        oidc = target.get("oidc_token")
        if not oidc:
            problems.append(f"google_cloud_scheduler_job.{name}: no oidc_token")
            continue
        token = one(oidc, "oidc_token")
        if token.get("audience") != target.get("uri"):
            problems.append(f"google_cloud_scheduler_job.{name}: oidc audience differs from the uri")
        member = token.get("service_account_email", "").replace(".email}", ".member}")
        if tf["locals"].get("invokers", {}).get(name) != member:
            problems.append(f"google_cloud_scheduler_job.{name}: {member} may not invoke {name}")
    return problems


def event_functions(tf: Module) -> set[str]:
    """Functions a Pub/Sub push subscription delivers to (they must take a CloudEvent)."""
    targets = set()
    for sub in tf["resource"].get("google_pubsub_subscription", {}).values():
        for push in sub.get("push_config", []):
            endpoint = push["push_endpoint"]
            if m := re.fullmatch(r"\$\{local\.(\w+)\}", endpoint):
                endpoint = tf["locals"][m.group(1)]
            if m := re.search(r'google_cloudfunctions2_function\.this\["(\w+)"\]', endpoint):
                targets.add(m.group(1))
    return targets


def check_entry_points(tf: Module, main_source: str) -> list[str]:
    defined = top_level_functions(main_source)
    wiring = function_wiring(tf)
    problems = [f"local.functions has no {name}" for name in FUNCTIONS if name not in wiring]
    events = event_functions(tf)
    for name, w in wiring.items():
        if w.entry_point not in defined:
            problems.append(f"{name}: entry point {w.entry_point!r} is not a top-level function of main.py")
            continue
        takes_event = "cloud_event" in defined[w.entry_point]
        if name in events and not takes_event:
            problems.append(f"{name}: Pub/Sub pushes to it, so decorate it @functions_framework.cloud_event")
        if name not in events and takes_event:
            problems.append(f"{name}: HTTP function decorated as a CloudEvent function")
    return problems


def check_secrets(tf: Module, required: dict[str, dict[str, str]]) -> list[str]:
    wiring = function_wiring(tf)
    declared = set(tf["locals"].get("secrets", {}))
    problems = []
    for name, needs in required.items():
        w = wiring.get(name)
        if w is None:
            problems.append(f"{name}: not deployed")
            continue
        for env, secret in needs.items():
            via_env = w.env_secrets.get(env) == secret
            via_mount = w.mounts.get(w.env.get(env, "")) == secret
            if not (via_env or via_mount):
                problems.append(f"{name}: {env} does not come from secret {secret} (not mounted)")
        for secret in {*w.env_secrets.values(), *w.mounts.values()} - declared:
            problems.append(f"{name}: reads secret {secret}, which local.secrets does not create")
        missing = [env for env in REQUIRED_ENV if env not in w.env]
        if missing:
            problems.append(f"{name}: environment lacks {missing}")
    # What local.secret_reads evaluates to is checked with the real terraform (test_terraform_evaluates...).
    grant = tf["resource"].get("google_secret_manager_secret_iam_member", {}).get("access", {})
    if (
        grant.get("for_each") != "${local.secret_reads}"
        or grant.get("role") != "roles/secretmanager.secretAccessor"
        or grant.get("member") != "${google_service_account.function[each.value.function].member}"
        or grant.get("secret_id") != "${google_secret_manager_secret.this[each.value.secret].secret_id}"
    ):
        problems.append("secret access is not granted per (function, secret) of local.secret_reads")
    return problems


def check_roles(tf: Module) -> list[str]:
    problems = []
    wiring = function_wiring(tf)
    for rtype, named in tf["resource"].items():
        if not re.search(r"_iam_(member|binding|policy)$", rtype):
            continue
        for name, body in named.items():
            where = f"{rtype}.{name}"
            if re.match(r"google_(project|folder|organization)_iam_(binding|policy)$", rtype):
                problems.append(f"{where}: authoritative project IAM would remove others' grants")
            role = body.get("role", "")
            if "${" in role:
                problems.append(f"{where}: role {role!r} must be a literal to be reviewed")
            elif role in BROAD_ROLES or role.lower().endswith("admin"):
                problems.append(f"{where}: role {role} is broader than any function needs")
            if rtype == "google_project_iam_member":
                if role not in PROJECT_ROLES:
                    problems.append(f"{where}: {role} at project level (grant it on the resource)")
                elif role.startswith("roles/storage.") and not body.get("condition"):
                    problems.append(f"{where}: project-wide {role} needs a condition")
            members = {"": body.get("member", "")}
            if body.get("for_each") == "${local.invokers}":
                members = dict(tf["locals"]["invokers"])
            for fn, who in members.items():
                if who not in ("allUsers", "allAuthenticatedUsers"):
                    continue
                public_invoker = body.get("for_each") == PUBLIC_FUNCTIONS and role == "roles/run.invoker"
                if fn or not public_invoker:
                    problems.append(f"{where}: {who} on {fn or 'a resource other than the public functions'}")
    accounts = tf["resource"].get("google_service_account", {}).get("function", {})
    if accounts.get("for_each") != "${local.functions}":
        problems.append("google_service_account.function is not one account per function")
    for name, w in wiring.items():
        if w.service_account != f"${{google_service_account.function[{name}].email}}":
            problems.append(f"{name}: runs as {w.service_account}, not its own service account")
        expected_ingress = "ALLOW_ALL" if w.public else "ALLOW_INTERNAL_ONLY"
        if w.ingress != expected_ingress:
            problems.append(f"{name}: ingress {w.ingress} (expected {expected_ingress})")
    return problems


def check_refresh_fanout(tf: Module) -> list[str]:
    """The refresh topic reaches reconcile with retries and a kept dead-letter queue."""
    subs = tf["resource"].get("google_pubsub_subscription", {})
    pushing = {n: s for n, s in subs.items() if s.get("topic") == "${google_pubsub_topic.refresh.id}"}
    if event_functions({**tf, "resource": {"google_pubsub_subscription": pushing}}) != {"reconcile"}:
        return ["the refresh topic does not push to reconcile"]
    problems = []
    for name, sub in pushing.items():
        push = one(sub["push_config"], "push_config")
        oidc = one(push.get("oidc_token"), "oidc_token") if push.get("oidc_token") else {}
        member = oidc.get("service_account_email", "").replace(".email}", ".member}")
        if tf["locals"].get("invokers", {}).get("reconcile") != member:
            problems.append(f"subscription {name}: pushes as {member or 'nobody'}, who may not invoke reconcile")
        if not sub.get("retry_policy"):
            problems.append(f"subscription {name}: no retry_policy")
        dead = one(sub.get("dead_letter_policy", [{}]), "dead_letter_policy").get("dead_letter_topic", "")
        kept = any(s.get("topic") == dead for s in subs.values())
        if not dead or dead == sub["topic"] or not kept:
            problems.append(f"subscription {name}: no dead-letter topic with a subscription keeping its messages")
        if int(sub.get("ack_deadline_seconds", 10)) < tf["locals"]["size_defaults"]["reconcile"]["timeout_seconds"]:
            problems.append(f"subscription {name}: ack deadline shorter than reconcile's timeout")
    return problems


def check_continuations(tf: Module) -> list[str]:
    """The continuation mechanism (docs/running-locally.md, "Continuations and coalescing"): reconcile refuses
    an early continuation and the reconcile subscription's retry backoff is the delay, so the backoff must
    be short enough to be precise, the attempts many enough that a minutes-long wait is not dead-lettered,
    and every function must know its step budget, well inside reconcile's timeout."""
    problems = []
    sub = tf["resource"].get("google_pubsub_subscription", {}).get("reconcile", {})
    policy = one(sub.get("retry_policy", [{}]), "retry_policy")
    backoff = tf["variable"].get("continuation_backoff_seconds", {}).get("default", {})
    values = {}
    for bound in ("minimum", "maximum"):
        expr, short = policy.get(f"{bound}_backoff", ""), bound[:3]
        if expr == f"${{var.continuation_backoff_seconds.{short}}}s" and short in backoff:
            values[short] = float(backoff[short])
        elif m := re.fullmatch(r"(\d+)s", str(expr)):
            values[short] = float(m.group(1))
        else:
            problems.append(f"subscription reconcile: {bound}_backoff {expr!r} is neither seconds nor the variable")
    if values.get("min", 0) > 10:
        problems.append(f"subscription reconcile: minimum backoff {values['min']:g}s makes every continuation "
                        "late by that much (at most 10 s)")
    attempts = float(tf["variable"].get("reconcile_max_attempts", {}).get("default", 0))
    if values and attempts * values.get("max", 0) < 20 * 60:
        problems.append(f"subscription reconcile: {attempts:g} attempts × {values.get('max', 0):g}s backoff "
                        "dead-letters a continuation due in under 20 minutes")
    if not tf["locals"].get("functions", {}).get("reconcile", {}).get("publishes"):
        problems.append("local.functions.reconcile: may not publish, so it cannot schedule its continuations")
    if tf["locals"].get("common_env", {}).get("TIDECD_STEP_BUDGET") != "${tostring(var.step_budget_seconds)}":
        problems.append("local.common_env: TIDECD_STEP_BUDGET is not var.step_budget_seconds")
    budget = float(tf["variable"].get("step_budget_seconds", {}).get("default", 0))
    timeout = float(tf["locals"]["size_defaults"]["reconcile"]["timeout_seconds"])
    if not 0 < budget <= timeout / 2:
        problems.append(f"step budget {budget:g}s is not within half of reconcile's timeout ({timeout:g}s)")
    return problems


# What the webhook function answers each event route with (shared/tidecd/usecases/registry_events.py;
# /audit/gke is the route agreed for the audit handler's Pub/Sub entries).
EVENT_ROUTES = {"audit": "/audit/gke", "gcr": registry_events.ROUTE + "gcr"}
WEBHOOK_URL = '${google_cloudfunctions2_function.this["webhook"].service_config[0].uri}'


def check_events(tf: Module) -> list[str]:
    """Events in (infra/events.tf): audit-log sinks per destination project → the audit topic, and each
    registry project's `gcr` topic, pushed to the webhook's routes with an OIDC token whose audience and
    signer the function is told (common_env), the sinks' writer identities allowed to publish, nothing else."""
    problems = []
    res, env, loc = tf["resource"], tf["locals"].get("common_env", {}), tf["locals"]
    if loc.get("webhook_url") != WEBHOOK_URL:
        problems.append(f"local.webhook_url {loc.get('webhook_url')!r} is not the webhook function's URL")
    if loc.get("event_routes") != EVENT_ROUTES:
        problems.append(f"local.event_routes {loc.get('event_routes')!r} are not the routes the webhook answers")
    if env.get("TIDECD_PUSH_AUDIENCE") != "${local.push_audience}":
        problems.append("local.common_env: TIDECD_PUSH_AUDIENCE is not local.push_audience")
    if env.get("TIDECD_PUSH_SERVICE_ACCOUNT") != "${google_service_account.events.email}":
        problems.append("local.common_env: TIDECD_PUSH_SERVICE_ACCOUNT is not the events service account")
    subs = res.get("google_pubsub_subscription", {})
    expected = {"audit": ("${google_pubsub_topic.audit.id}", None),
                "registry": ("projects/${each.key}/topics/gcr", "${toset(var.artifact_registry_projects)}")}
    for name, (topic, for_each) in expected.items():
        sub = subs.get(name)
        if sub is None:
            problems.append(f"no google_pubsub_subscription.{name}")
            continue
        if sub.get("topic") != topic or sub.get("for_each") != for_each:
            problems.append(f"subscription {name}: topic {sub.get('topic')!r} (for_each {sub.get('for_each')!r}) "
                            f"is not {topic!r}")
    for name, sub in subs.items():
        for push in sub.get("push_config", []):
            endpoint = push.get("push_endpoint", "")
            if not endpoint.startswith("${local.webhook_url}"):
                continue
            route = "audit" if name == "audit" else "gcr"
            if endpoint != f"${{local.webhook_url}}${{local.event_routes.{route}}}":
                problems.append(f"subscription {name}: pushes to {endpoint!r}, not the webhook's {route} route")
            oidc = one(push["oidc_token"], "oidc_token") if push.get("oidc_token") else {}
            if oidc.get("service_account_email") != "${google_service_account.events.email}" or \
                    oidc.get("audience") != "${local.push_audience}":
                problems.append(f"subscription {name}: its pushes carry no OIDC token of the events account "
                                "with local.push_audience, so the webhook refuses them")
            if not sub.get("retry_policy"):
                problems.append(f"subscription {name}: no retry_policy")
    sink = res.get("google_logging_project_sink", {}).get("audit", {})
    if sink.get("for_each") != "${local.audit_log_filters}" or sink.get("project") != "${each.key}" or \
            sink.get("filter") != "${each.value}":
        problems.append("google_logging_project_sink.audit is not one sink per local.audit_log_filters project")
    if sink.get("destination") != "pubsub.googleapis.com/${google_pubsub_topic.audit.id}":
        problems.append(f"google_logging_project_sink.audit: destination {sink.get('destination')!r}")
    if sink.get("unique_writer_identity") is not True:
        problems.append("google_logging_project_sink.audit: no unique_writer_identity to grant publishing to")
    grant = res.get("google_pubsub_topic_iam_member", {}).get("audit_sink", {})
    if (grant.get("for_each") != "${google_logging_project_sink.audit}"
            or grant.get("member") != "${each.value.writer_identity}"
            or grant.get("role") != "roles/pubsub.publisher"
            or grant.get("topic") != "${google_pubsub_topic.audit.name}"):
        problems.append("the sinks' writer identities may not publish to the audit topic (audit_sink grant)")
    return problems


def memory_mib(text: str) -> float:
    m = re.fullmatch(r"(\d+)(M|Mi|G|Gi)", text)
    assert m, text
    return int(m.group(1)) * {"M": 1, "Mi": 1, "G": 1000, "Gi": 1024}[m.group(2)]


# -- tests on the real module --------------------------------------------------------------------


def test_terraform_fmt_is_clean() -> None:
    result = subprocess.run(
        [binary("terraform"), "fmt", "-check", "-recursive", "-diff", str(INFRA)],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, f"run `terraform fmt -recursive infra`:\n{result.stdout}{result.stderr}"


def test_terraform_fmt_check_fails_on_misformatted_file(tmp_path: Path) -> None:
    (tmp_path / "bad.tf").write_text('resource "x" "y" {\nname="a"\n  count     = 1\n}\n')
    result = subprocess.run(
        [binary("terraform"), "fmt", "-check", "-recursive", str(tmp_path)], capture_output=True, timeout=120
    )
    assert result.returncode != 0


class Terraform:
    """variables.tf + wiring.tf in a scratch root module: real terraform evaluates them, no provider."""

    REQUIRED = {"project_id": "acme-gitops", "region": "europe-west1",
                "config_source": "https://github.com/acme/deploy.git#main:apps"}

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        for name in ("variables.tf", "wiring.tf"):
            (workdir / name).write_text((INFRA / name).read_text())
        self.run(["init", "-backend=false", "-input=false", "-no-color"], check=True)

    def run(self, args: list[str], stdin: str = "", check: bool = False) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([binary("terraform"), *args], cwd=self.workdir, input=stdin,
                                capture_output=True, text=True, timeout=120)
        assert not check or result.returncode == 0, result.stdout + result.stderr
        return result

    def var_args(self, **overrides: str) -> list[str]:
        return [f"-var={k}={v}" for k, v in {**self.REQUIRED, **overrides}.items()]

    def evaluate(self, expr: str, **overrides: str) -> Any:
        out = self.run(["console", *self.var_args(**overrides)], stdin=f"jsonencode({expr})\n", check=True)
        return json.loads(json.loads(out.stdout))

    def problems(self, **overrides: str) -> str:
        """Validation errors for these variable values ("" when every validation passes)."""
        result = self.run(["plan", "-input=false", "-no-color", "-refresh=false", *self.var_args(**overrides)])
        return "" if result.returncode == 0 else result.stdout + result.stderr


@pytest.fixture(scope="module")
def terraform(tmp_path_factory: pytest.TempPathFactory) -> Terraform:
    return Terraform(tmp_path_factory.mktemp("tf"))


def test_terraform_evaluates_the_secret_grants_the_wiring_needs(tf: Module, terraform: Terraform) -> None:
    reads = terraform.evaluate("local.secret_reads")
    granted = {(r["function"], r["secret"]) for r in reads.values()}
    needed = {
        (name, secret)
        for name, w in function_wiring(tf).items()
        for secret in {*w.env_secrets.values(), *w.mounts.values()}
    }
    assert granted == needed
    assert granted == {(fn, secret) for fn, needs in REQUIRED_SECRETS.items() for secret in needs.values()}


def test_terraform_evaluates_public_functions_and_size_overrides(terraform: Terraform) -> None:
    assert set(terraform.evaluate("local.public_functions")) == {"webhook", "api"}
    sizes = terraform.evaluate("local.sizes", function_sizes='{reconcile={memory="4Gi",cpu="2"}}')
    assert sizes["reconcile"] == {"memory": "4Gi", "cpu": "2", "timeout_seconds": 300, "max_instances": 20}
    assert sizes["webhook"] == {"memory": "512M", "cpu": "0.333", "timeout_seconds": 110, "max_instances": 10}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("config_source", "https://github.com/acme/deploy.git"),
        ("config_source", "git@github.com:acme/deploy.git#v1.2:clusters/prod"),
        ("config_source", "ssh://git@example.com/acme/deploy.git#main:."),
        ("name_prefix", "td"),
        ("region", "us-central1"),
        ("function_sizes", '{api={memory="2Gi",timeout_seconds=540,max_instances=3}}'),
        ("sealing_key_versions", '["latest","3"]'),
        ("continuation_backoff_seconds", "{min=0,max=600}"),
        ("step_budget_seconds", "30"),
        ("retention", "{deliveries_days=1,snapshots_days=90,manifests_days=7,history_limit=50}"),
        ("audit_log_projects", '["gke-prod-eu","gke-prod-us"]'),
        ("artifact_registry_projects", '["acme-images"]'),
        ("gke_projects", '["gke-prod-eu"]'),
    ],
)
def test_variable_validations_accept(terraform: Terraform, name: str, value: str) -> None:
    assert terraform.problems(**{name: value}) == ""


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("project_id", "123456789012", "project_id must be a project ID"),
        ("region", "europe-west1-b", "region must be a Google Cloud region"),
        ("config_source", "./examples/config", "config_source must be a git URL"),
        ("name_prefix", "a-very-long-prefix-here", "name_prefix must be 2-20 characters"),
        ("function_sizes", "{poller={}}", "function_sizes keys must be among"),
        ("function_sizes", '{reconcile={memory="lots"}}', "function_sizes memory must look like"),
        ("function_sizes", "{reconcile={timeout_seconds=900}}", "timeout_seconds must be between 1 and 540"),
        ("source_zip", "dist/functions.tar.gz", "source_zip must be the path of a .zip file"),
        ("sealing_key_versions", '["newest"]', "sealing_key_versions must be a non-empty list"),
        ("reconcile_max_attempts", "3", "reconcile_max_attempts must be between 5 and 100"),
        ("continuation_backoff_seconds", "{min=30,max=10}", "continuation_backoff_seconds needs"),
        ("step_budget_seconds", "0", "step_budget_seconds must be between 1 and 60"),
        ("retention", "{deliveries_days=0,snapshots_days=30,manifests_days=30,history_limit=10}",
         "retention values must be whole numbers of at least 1"),
        ("audit_log_projects", '["Prod Cluster"]', "audit_log_projects must be project IDs"),
        ("artifact_registry_projects", '["123456789012"]', "artifact_registry_projects must be project IDs"),
        ("gke_projects", '["Prod"]', "gke_projects must be project IDs"),
    ],
)
def test_variable_validations_reject(terraform: Terraform, name: str, value: str, message: str) -> None:
    problems = " ".join(terraform.problems(**{name: value}).split())
    assert message in problems, problems


def test_every_tf_file_parses() -> None:
    files = sorted(INFRA.rglob("*.tf"))
    assert len(files) >= 8, files
    for directory in {f.parent for f in files}:
        assert load_module(directory)["resource"] or load_module(directory)["module"], directory


def test_poll_every_three_minutes_and_images_every_two_with_oidc(tf: Module) -> None:
    assert check_schedule(tf) == []


def test_entry_points_match_the_fixture(tf: Module) -> None:
    assert check_entry_points(tf, MAIN_FIXTURE) == []


def test_entry_points_exist_in_functions_main_py(tf: Module) -> None:
    assert MAIN_PY.is_file(), f"{MAIN_PY} is missing: the functions' entry points live there"
    assert check_entry_points(tf, MAIN_PY.read_text()) == []


def test_every_secret_a_function_reads_is_mounted(tf: Module) -> None:
    assert check_secrets(tf, REQUIRED_SECRETS) == []


def test_no_role_broader_than_needed(tf: Module) -> None:
    assert check_roles(tf) == []


def check_gke(tf: Module) -> list[str]:
    """GKE through reconcile's Google identity: on each of gke_projects, reconcile alone may authenticate
    (container.clusterViewer), and no other container role is granted anywhere."""
    problems = []
    for rtype, named in tf["resource"].items():
        for name, body in named.items():
            role = str(body.get("role", ""))
            if not role.startswith("roles/container."):
                continue
            where = f"{rtype}.{name}"
            if role != "roles/container.clusterViewer":
                problems.append(f"{where}: {role} grants rights inside clusters (use their RBAC)")
            if body.get("member") != '${google_service_account.function["reconcile"].member}':
                problems.append(f"{where}: {role} for {body.get('member')}, not reconcile")
            if body.get("for_each") != "${toset(var.gke_projects)}" or body.get("project") != "${each.key}":
                problems.append(f"{where}: {role} outside gke_projects")
    if not any("container" in str(b.get("role", "")) for named in tf["resource"].values() for b in named.values()):
        problems.append("no grant lets reconcile authenticate to GKE (gke_projects)")
    return problems


def test_reconcile_alone_may_authenticate_to_gke_on_the_listed_projects(tf: Module, terraform: Terraform) -> None:
    assert check_gke(tf) == []
    broken = copy.deepcopy(tf)
    grant = broken["resource"]["google_project_iam_member"]["gke_reconcile"]
    grant["role"], grant["member"] = "roles/container.developer", '${google_service_account.function["api"].member}'
    assert check_gke(broken) == [
        "google_project_iam_member.gke_reconcile: roles/container.developer grants rights inside clusters (use their "
        "RBAC)",
        "google_project_iam_member.gke_reconcile: roles/container.developer for "
        '${google_service_account.function["api"].member}, not reconcile']
    assert terraform.problems(gke_projects='["gke-prod-eu","gke-prod-us"]') == ""


def test_refreshes_reach_reconcile_with_retries_and_dead_letters(tf: Module) -> None:
    assert check_refresh_fanout(tf) == []


def test_continuations_wait_on_the_retry_backoff_within_the_step_budget(tf: Module) -> None:
    assert check_continuations(tf) == []


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("resource", "google_pubsub_subscription", "reconcile", "retry_policy"),
         [{"minimum_backoff": "30s", "maximum_backoff": "600s"}], "minimum backoff 30s"),
        (("variable", "reconcile_max_attempts", "default"), 5, "dead-letters a continuation"),
        (("locals", "common_env", "TIDECD_STEP_BUDGET"), "10", "TIDECD_STEP_BUDGET is not"),
        (("locals", "functions", "reconcile", "publishes"), False, "cannot schedule its continuations"),
        (("variable", "step_budget_seconds", "default"), 200, "not within half of reconcile's timeout"),
    ],
)
def test_check_continuations_fails_on_a_broken_copy(tf: Module, path: tuple[str, ...], value: Any,
                                                    message: str) -> None:
    broken = copy.deepcopy(tf)
    target = broken
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    assert any(message in p for p in check_continuations(broken)), check_continuations(broken)


def test_audit_sinks_and_registry_notifications_reach_the_webhook_with_an_oidc_token(tf: Module) -> None:
    assert check_events(tf) == []


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("resource", "google_pubsub_subscription", "registry", "push_config", 0, "oidc_token"), [],
         "subscription registry: its pushes carry no OIDC token"),
        (("resource", "google_pubsub_subscription", "audit", "push_config", 0, "push_endpoint"),
         "${local.webhook_url}${local.event_routes.gcr}", "not the webhook's audit route"),
        (("locals", "event_routes", "gcr"), "/gcr", "are not the routes the webhook answers"),
        (("locals", "common_env", "TIDECD_PUSH_SERVICE_ACCOUNT"), "${google_service_account.push.email}",
         "TIDECD_PUSH_SERVICE_ACCOUNT is not the events service account"),
        (("resource", "google_logging_project_sink", "audit", "unique_writer_identity"), False,
         "no unique_writer_identity"),
        (("resource", "google_pubsub_topic_iam_member", "audit_sink", "role"), "roles/pubsub.viewer",
         "may not publish to the audit topic"),
        (("resource", "google_pubsub_subscription", "registry", "topic"), "projects/${each.key}/topics/gcr-x",
         "subscription registry: topic"),
    ],
)
def test_check_events_fails_on_a_broken_copy(tf: Module, path: tuple[Any, ...], value: Any, message: str) -> None:
    broken = copy.deepcopy(tf)
    target: Any = broken
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    assert any(message in p for p in check_events(broken)), check_events(broken)


def test_terraform_evaluates_one_audit_filter_per_destination_project(terraform: Terraform) -> None:
    filters = terraform.evaluate("local.audit_log_filters", audit_log_projects='["gke-prod-eu","gke-prod-us"]')
    assert filters == {p: f'logName="projects/{p}/logs/cloudaudit.googleapis.com%2Factivity" AND '
                          'protoPayload.serviceName="k8s.io"' for p in ("gke-prod-eu", "gke-prod-us")}
    assert terraform.evaluate("local.audit_log_filters") == {}
    assert terraform.evaluate("local.event_routes") == EVENT_ROUTES
    assert terraform.evaluate("local.push_audience", name_prefix="td") == "td-webhook-events"


def test_only_webhook_and_api_are_public(tf: Module) -> None:
    public = {name for name, w in function_wiring(tf).items() if w.public}
    assert public == {"webhook", "api"}


def test_functions_are_python311_scaled_to_zero_and_sized_for_rendering(tf: Module) -> None:
    body = tf["resource"]["google_cloudfunctions2_function"]["this"]
    assert one(body["build_config"], "build_config")["runtime"] == "python311"
    assert one(body["service_config"], "service_config")["min_instance_count"] == 0
    sizes = tf["locals"]["size_defaults"]
    assert set(sizes) == set(FUNCTIONS)
    assert memory_mib(sizes["reconcile"]["memory"]) >= 1024 and sizes["reconcile"]["timeout_seconds"] >= 300
    assert memory_mib(sizes["api"]["memory"]) >= 1024
    assert sizes["poll"]["timeout_seconds"] < 180, "a poll must end before the next tick"


def test_state_bucket_is_private_uniform_and_versioned(tf: Module) -> None:
    for name in ("state", "sources"):
        bucket = tf["resource"]["google_storage_bucket"][name]
        assert bucket["uniform_bucket_level_access"] is True, name
        assert bucket["public_access_prevention"] == "enforced", name
        assert one(bucket["versioning"], "versioning")["enabled"] is True, name
    assert "google_storage_bucket.state.name" in tf["locals"]["common_env"]["TIDECD_STORE"]
    assert tf["locals"]["common_env"]["TIDECD_REFRESH_TOPIC"] == "${google_pubsub_topic.refresh.id}"


def test_outputs_are_the_webhook_and_api_urls(tf: Module) -> None:
    for name in ("webhook", "api"):
        value = tf["output"][f"{name}_url"]["value"]
        assert value == f'${{google_cloudfunctions2_function.this["{name}"].url}}'


def test_variables_are_described_typed_and_validated(tf: Module) -> None:
    for name, spec in tf["variable"].items():
        assert spec.get("description") and spec.get("type"), f"variable {name} needs a description and a type"
    for name in ("project_id", "region", "config_source", "name_prefix", "function_sizes", "source_zip"):
        assert tf["variable"][name].get("validation"), f"variable {name} needs a validation"


def test_example_calls_the_module_with_every_required_variable(tf: Module) -> None:
    example = load_module(EXAMPLE)
    (call,) = example["module"].values()
    assert (EXAMPLE / call["source"]).resolve() == INFRA
    required = {name for name, spec in tf["variable"].items() if "default" not in spec}
    assert required == {"project_id", "region", "config_source"}
    assert required <= set(call), f"example does not pass {required - set(call)}"
    assert set(call) - {"source"} <= set(tf["variable"]), "example passes an unknown variable"


# -- negative tests: the same checks on broken copies --------------------------------------------


def test_check_schedule_fails_on_a_wrong_schedule(tf: Module) -> None:
    broken = copy.deepcopy(tf)
    broken["resource"]["google_cloud_scheduler_job"]["poll"]["schedule"] = "*/5 * * * *"
    assert any("not every 3 min" in p for p in check_schedule(broken))
    assert cron_minutes("0-59/3 * * * *") == set(range(0, 60, 3))
    assert cron_minutes("*/3 * * * 1") is None


def test_check_schedule_fails_without_oidc(tf: Module) -> None:
    broken = copy.deepcopy(tf)
    del broken["resource"]["google_cloud_scheduler_job"]["poll"]["http_target"][0]["oidc_token"]
    assert check_schedule(broken) == ["google_cloud_scheduler_job.poll: no oidc_token"]


def test_check_entry_points_fails_on_a_missing_entry_point(tf: Module) -> None:
    without_poll = MAIN_FIXTURE.replace("def poll(request)", "def polling(request)")
    assert check_entry_points(tf, without_poll) == [
        "poll: entry point 'poll' is not a top-level function of main.py"
    ]


def test_check_entry_points_fails_on_a_nested_or_wrongly_typed_entry_point(tf: Module) -> None:
    nested = MAIN_FIXTURE.replace("def _helper(): ...", "class X:\n    def api(self): ...").replace(
        "def api(request): ...", "def api_v1(request): ..."
    )
    assert any("'api'" in p for p in check_entry_points(tf, nested))
    plain_reconcile = MAIN_FIXTURE.replace("@functions_framework.cloud_event\n", "")
    assert any("cloud_event" in p for p in check_entry_points(tf, plain_reconcile))


def test_check_secrets_fails_on_an_unmounted_secret(tf: Module) -> None:
    broken = copy.deepcopy(tf)
    broken["locals"]["functions"]["api"]["sealing_keys"] = False
    problems = check_secrets(broken, REQUIRED_SECRETS)
    assert problems == ["api: TIDECD_SEALING_KEYS does not come from secret sealing-keys (not mounted)"]


def test_check_secrets_fails_when_the_volume_block_is_gone(tf: Module) -> None:
    broken = copy.deepcopy(tf)
    service = broken["resource"]["google_cloudfunctions2_function"]["this"]["service_config"][0]
    service["dynamic"] = [d for d in service["dynamic"] if "secret_volumes" not in d]
    problems = check_secrets(broken, REQUIRED_SECRETS)
    assert {p.split(":")[0] for p in problems} == {"webhook", "poll", "images", "reconcile", "api"}


def test_check_secrets_fails_on_a_missing_secret_env(tf: Module) -> None:
    broken = copy.deepcopy(tf)
    broken["locals"]["functions"]["webhook"]["secret_env"] = {}
    assert check_secrets(broken, REQUIRED_SECRETS) == [
        "webhook: TIDECD_WEBHOOK_SECRET does not come from secret webhook-secret (not mounted)"
    ]


def test_check_roles_fails_on_broad_or_public_grants(tf: Module) -> None:
    broken = copy.deepcopy(tf)
    broken["resource"]["google_project_iam_member"]["oops"] = {
        "role": "roles/editor", "member": "${google_service_account.function[\"api\"].member}"
    }
    broken["resource"]["google_storage_bucket_iam_member"]["admin"] = {
        "role": "roles/storage.admin", "member": "x"
    }
    broken["locals"]["invokers"]["poll"] = "allUsers"
    broken["resource"]["google_pubsub_topic_iam_member"]["publisher"]["member"] = "allAuthenticatedUsers"
    problems = check_roles(broken)
    assert "google_project_iam_member.oops: role roles/editor is broader than any function needs" in problems
    assert "google_project_iam_member.oops: roles/editor at project level (grant it on the resource)" in problems
    admin = "google_storage_bucket_iam_member.admin: role roles/storage.admin is broader than any function needs"
    assert admin in problems
    assert "google_cloud_run_service_iam_member.private: allUsers on poll" in problems
    assert (
        "google_pubsub_topic_iam_member.publisher: allAuthenticatedUsers on a resource other than the public functions"
        in problems
    )


def test_check_roles_fails_on_a_shared_service_account(tf: Module) -> None:
    broken = copy.deepcopy(tf)
    service = broken["resource"]["google_cloudfunctions2_function"]["this"]["service_config"][0]
    service["service_account_email"] = "${google_service_account.build.email}"
    assert len(check_roles(broken)) == len(FUNCTIONS)


def test_check_refresh_fanout_fails_without_dead_letters(tf: Module) -> None:
    broken = copy.deepcopy(tf)
    del broken["resource"]["google_pubsub_subscription"]["reconcile"]["dead_letter_policy"]
    assert check_refresh_fanout(broken) == [
        "subscription reconcile: no dead-letter topic with a subscription keeping its messages"
    ]


def test_unknown_expression_shapes_are_reported_not_ignored(tf: Module) -> None:
    broken = copy.deepcopy(tf)
    service = broken["resource"]["google_cloudfunctions2_function"]["this"]["service_config"][0]
    service["environment_variables"] = "${local.something_else}"
    with pytest.raises(Unreadable):
        function_wiring(broken)


def test_every_skipped_security_check_is_explained() -> None:
    skips = []
    for path in sorted(INFRA.rglob("*.tf")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "checkov:skip" in line:
                skips.append((f"{path.relative_to(ROOT)}:{number}", line.strip()))
    assert skips, "expected the accepted findings to be listed"
    for where, line in skips:
        m = re.fullmatch(r"#checkov:skip=(CKV2?_[A-Z]+_\d+):(.+)", line)
        assert m, f"{where}: write `#checkov:skip=CKV_..._N:reason` ({line})"
        assert len(m.group(2).split()) >= 6, f"{where}: {m.group(1)} needs a real reason"


def test_check_schedule_fails_when_images_is_not_every_two_minutes(tf: Module) -> None:
    broken = copy.deepcopy(tf)
    broken["resource"]["google_cloud_scheduler_job"]["images"]["schedule"] = "*/3 * * * *"
    assert check_schedule(broken) == ["google_cloud_scheduler_job.images: schedule '*/3 * * * *' is not every 2 min"]
    del broken["resource"]["google_cloud_scheduler_job"]["images"]
    assert check_schedule(broken) == ["expected google_cloud_scheduler_job ['images', 'poll'], found ['poll']"]


def test_state_bucket_expires_deliveries_snapshots_and_manifests_by_lifecycle_rules(tf: Module) -> None:
    """Retention in GCS is the bucket's job (tidecd.clients.retention): one Delete rule per prefix, by age."""
    bucket = tf["resource"]["google_storage_bucket"]["state"]
    [dynamic] = [d["lifecycle_rule"] for d in bucket["dynamic"] if "lifecycle_rule" in d]
    assert dynamic["for_each"] == "${local.retention_prefixes}"
    content = one(dynamic["content"], "lifecycle_rule content")
    condition = one(content["condition"], "condition")
    assert condition == {"age": "${lifecycle_rule.value}",
                         "matches_prefix": ["${var.store_prefix}/${lifecycle_rule.key}"]}
    assert one(content["action"], "action") == {"type": "Delete"}
    assert tf["locals"]["retention_prefixes"] == {
        "deliveries/": "${var.retention.deliveries_days}", "snapshots/": "${var.retention.snapshots_days}",
        "manifests/": "${var.retention.manifests_days}", "config-cache/": "${var.retention.snapshots_days}"}
    env = tf["locals"]["common_env"]
    for variable, name in (("TIDECD_RETAIN_DELIVERIES_DAYS", "deliveries_days"),
                            ("TIDECD_RETAIN_SNAPSHOTS_DAYS", "snapshots_days"),
                            ("TIDECD_RETAIN_MANIFESTS_DAYS", "manifests_days"),
                            ("TIDECD_HISTORY_LIMIT", "history_limit")):
        assert env[variable] == f"${{tostring(var.retention.{name})}}", variable
    from tidecd.clients.retention import Retention

    defaults = tf["variable"]["retention"]["default"]
    assert defaults == dict(Retention().__dict__), "Terraform and tidecd agree on the defaults"


def test_functions_know_the_dashboard_url_and_github_api(tf: Module) -> None:
    """GitHub statuses and notifications link to the dashboard: the cloud functions get its URL."""
    env = tf["locals"]["common_env"]
    assert env["TIDECD_PUBLIC_URL"] == "${var.public_url}"
    assert env["TIDECD_GITHUB_API_URL"] == "${var.github_api_url}"
    assert tf["variable"]["github_api_url"]["default"] == "https://api.github.com"
