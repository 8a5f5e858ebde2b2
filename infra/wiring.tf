# The single place that says what each function is: its entry point in functions/main.py, who may
# call it, whether it publishes refreshes, which secrets it reads, and its size. Every IAM grant, secret
# mount and environment variable is derived from these locals.
#
# This file refers to nothing but variables and other locals, so tests/unit/test_infra.py evaluates it
# with the real terraform, offline (no provider needed).

locals {
  functions = {
    webhook = {
      entry_point  = "webhook"
      description  = "Push webhooks (GitHub/GitLab, registries) and Pub/Sub pushes of audit logs and registry notifications: checks each sender's proof and fans out refreshes."
      public       = true # GitHub and registries cannot send Google ID tokens; each request proves itself
      publishes    = true
      secret_env   = { TIDECD_WEBHOOK_SECRET = "webhook-secret" }
      sealing_keys = true # a registry notification runs the image updater: registry pull secrets, git write-back
    }
    poll = {
      entry_point  = "poll"
      description  = "Called every three minutes by Cloud Scheduler: one ls-remote per repo, refreshes moved heads."
      public       = false
      publishes    = true
      secret_env   = {}
      sealing_keys = true # unseals repository credentials
    }
    images = {
      entry_point  = "images"
      description  = "Called every two minutes by Cloud Scheduler: one tags list per image repo, new tags become commits."
      public       = false
      publishes    = true
      secret_env   = {}
      sealing_keys = true # unseals registry pull secrets and repository credentials (git write-back)
    }
    reconcile = {
      entry_point  = "reconcile"
      description  = "Pub/Sub push target: one bounded reconcile step of one application; schedules the next."
      public       = false
      publishes    = true # its own continuations, and the re-run of a coalesced refresh
      secret_env   = {}
      sealing_keys = true # unseals cluster and repository credentials
    }
    api = {
      entry_point  = "api"
      description  = "HTTP API of the CLI and dashboard, authenticated by a bearer token."
      public       = true # the bearer token travels in Authorization, so Cloud Run IAM cannot be used too
      publishes    = true
      secret_env   = { TIDECD_API_TOKEN = "api-token", TIDECD_API_READONLY_TOKEN = "api-readonly-token" }
      sealing_keys = true
    }
  }

  # Defaults sized for rendering (helm and kustomize run inside reconcile and api).
  size_defaults = {
    webhook   = { memory = "512M", cpu = "0.333", timeout_seconds = 110, max_instances = 10 } # a registry notification runs the image updater
    poll      = { memory = "512M", cpu = "0.333", timeout_seconds = 170, max_instances = 1 }
    images    = { memory = "512M", cpu = "0.333", timeout_seconds = 110, max_instances = 1 }
    reconcile = { memory = "2Gi", cpu = "1", timeout_seconds = 300, max_instances = 20 } # a cold render of a big chart; steps never wait
    api       = { memory = "1Gi", cpu = "0.583", timeout_seconds = 300, max_instances = 10 }
  }
  sizes = {
    for name, d in local.size_defaults : name => {
      memory          = coalesce(try(var.function_sizes[name].memory, null), d.memory)
      cpu             = coalesce(try(var.function_sizes[name].cpu, null), d.cpu)
      timeout_seconds = coalesce(try(var.function_sizes[name].timeout_seconds, null), d.timeout_seconds)
      max_instances   = coalesce(try(var.function_sizes[name].max_instances, null), d.max_instances)
    }
  }

  secrets = {
    webhook-secret     = "GitHub/GitLab webhook secret (key of the X-Hub-Signature-256 HMAC)"
    api-token          = "Bearer token of the tidecd api"
    api-readonly-token = "Read-only token of the tidecd dashboard (sees everything, acts on nothing)"
    sealing-keys       = "PEM private key(s) that unseal the cluster and repository SealedSecrets"
  }
  sealing_keys_dir = "/etc/tidecd/sealing"

  # Events pushed to the webhook function by Pub/Sub (events.tf): the path of each, and the audience of the
  # OIDC token every such push carries; the function checks both (TIDECD_PUSH_AUDIENCE, clients/pushauth.py).
  event_routes = {
    audit = "/audit/gke"    # GKE Admin Activity audit log entries, from the Log Router sinks
    gcr   = "/registry/gcr" # Artifact Registry notifications (usecases/registry_events.py)
  }
  push_audience = "${var.name_prefix}-webhook-events"

  # One Log Router sink per destination project: its Admin Activity audit log, Kubernetes API calls only.
  audit_log_filters = {
    for p in var.audit_log_projects : p => join(" AND ", [
      "logName=\"projects/${p}/logs/cloudaudit.googleapis.com%2Factivity\"",
      "protoPayload.serviceName=\"k8s.io\"",
    ])
  }

  # The functions anyone may call: they authenticate each request themselves.
  public_functions = toset([for name, f in local.functions : name if f.public])

  # One secret grant per (function, secret it reads), on the secret itself.
  secret_reads = merge([
    for name, f in local.functions : merge(
      { for env, secret in f.secret_env : "${name}/${secret}" => { function = name, secret = secret } },
      f.sealing_keys ? { "${name}/sealing-keys" = { function = name, secret = "sealing-keys" } } : {},
    )
  ]...)
}
