variable "project_id" {
  description = "ID of the Google Cloud project that runs tidecd (functions, state bucket, topics, secrets)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a project ID (6-30 characters: lowercase letters, digits, hyphens), not a project number or name."
  }
}

variable "region" {
  description = "Region of the functions, the Cloud Scheduler job, the buckets and the Artifact Registry repository, e.g. europe-west1."
  type        = string

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]+$", var.region))
    error_message = "region must be a Google Cloud region such as europe-west1 or us-central1 (not a zone)."
  }
}

variable "config_source" {
  description = "Where the Application and AppProject manifests live, as TIDECD_CONFIG: a git URL with optional #REF:PATH, e.g. https://github.com/acme/deploy.git#main:apps (REF defaults to HEAD, PATH to the root)."
  type        = string

  validation {
    condition     = can(regex("^([a-z][a-z0-9+.-]*://|[^@/:\\s]+@[^/:\\s]+:)[^#\\s]+(#[^:#\\s]*(:[^#\\s]*)?)?$", var.config_source))
    error_message = "config_source must be a git URL (https://..., ssh://... or git@host:org/repo) with optional #REF:PATH, e.g. https://github.com/acme/deploy.git#main:apps; a local directory cannot be read by a cloud function."
  }
}

variable "name_prefix" {
  description = "Prefix of every resource name (functions, service accounts, buckets, topics, secrets); lets several installations share a project."
  type        = string
  default     = "tidecd"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,18}[a-z0-9]$", var.name_prefix))
    error_message = "name_prefix must be 2-20 characters of lowercase letters, digits and hyphens, starting with a letter (service account IDs are limited to 30 characters)."
  }
}

variable "store_prefix" {
  description = "Object name prefix inside the state bucket; the functions get TIDECD_STORE=gs://BUCKET/PREFIX."
  type        = string
  default     = "tidecd"

  validation {
    condition     = can(regex("^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$", var.store_prefix))
    error_message = "store_prefix must be a relative object prefix such as tidecd or env/prod (no leading or trailing slash)."
  }
}

variable "retention" {
  description = "Days the state bucket keeps webhook deliveries, repository snapshots and rendered manifests (lifecycle rules), and state history entries per app."
  type = object({
    deliveries_days = number
    snapshots_days  = number
    manifests_days  = number
    history_limit   = number
  })
  default = {
    deliveries_days = 7
    snapshots_days  = 30
    manifests_days  = 30
    history_limit   = 10
  }

  validation {
    condition = alltrue([
      for v in [var.retention.deliveries_days, var.retention.snapshots_days, var.retention.manifests_days,
      var.retention.history_limit] : v >= 1 && floor(v) == v
    ])
    error_message = "retention values must be whole numbers of at least 1."
  }
}

variable "function_sizes" {
  description = <<-EOT
    Per-function overrides, keyed by webhook, poll, images, reconcile or api: memory ("512M", "1Gi", ...), cpu
    ("0.583", "1", "2"), timeout_seconds (1-540) and max_instances. Fields left out keep the defaults, which
    are sized for rendering: reconcile 2Gi / 1 CPU / 540 s, api 1Gi / 300 s, poll 512M / 170 s (under the
    three-minute schedule), images 512M / 110 s (under two minutes), webhook 512M / 110 s (a registry
    notification runs the image updater as images does). Min instances are
    always 0.
  EOT
  type = map(object({
    memory          = optional(string)
    cpu             = optional(string)
    timeout_seconds = optional(number)
    max_instances   = optional(number)
  }))
  default = {}

  validation {
    condition     = alltrue([for name in keys(var.function_sizes) : contains(["webhook", "poll", "images", "reconcile", "api"], name)])
    error_message = "function_sizes keys must be among webhook, poll, images, reconcile, api."
  }

  validation {
    condition     = alltrue([for s in values(var.function_sizes) : s.memory == null || can(regex("^[0-9]+(M|Mi|G|Gi)$", s.memory))])
    error_message = "function_sizes memory must look like 256M, 512M, 1Gi or 2Gi."
  }

  validation {
    condition     = alltrue([for s in values(var.function_sizes) : s.cpu == null || can(regex("^[0-9]+(\\.[0-9]+)?$", s.cpu))])
    error_message = "function_sizes cpu must be a number of vCPUs as a string, e.g. \"0.583\", \"1\" or \"2\"."
  }

  validation {
    condition     = alltrue([for s in values(var.function_sizes) : coalesce(s.timeout_seconds, 60) >= 1 && coalesce(s.timeout_seconds, 60) <= 540])
    error_message = "function_sizes timeout_seconds must be between 1 and 540 (the reconcile subscription's ack deadline is 600 s)."
  }

  validation {
    condition     = alltrue([for s in values(var.function_sizes) : coalesce(s.max_instances, 1) >= 1 && coalesce(s.max_instances, 1) <= 100])
    error_message = "function_sizes max_instances must be between 1 and 100."
  }
}

variable "source_zip" {
  description = "Path of the function source archive built by `make package`; null means dist/tidecd-functions.zip in this repository."
  type        = string
  default     = null

  validation {
    condition     = var.source_zip == null || can(regex("\\.zip$", var.source_zip))
    error_message = "source_zip must be the path of a .zip file (build it with `make package`)."
  }
}

variable "sealing_key_versions" {
  description = "Secret Manager versions of the sealing-keys secret mounted as PEM files in TIDECD_SEALING_KEYS; list the old version beside \"latest\" while rotating."
  type        = list(string)
  default     = ["latest"]

  validation {
    condition     = length(var.sealing_key_versions) > 0 && alltrue([for v in var.sealing_key_versions : can(regex("^(latest|[1-9][0-9]*)$", v))])
    error_message = "sealing_key_versions must be a non-empty list of \"latest\" or version numbers such as \"3\"."
  }
}

variable "reconcile_max_attempts" {
  description = "Deliveries of one refresh message to reconcile before it goes to the dead-letter topic."
  type        = number
  default     = 30 # early continuations are nacked too (see pubsub.tf): 30 attempts ≈ 25 minutes

  validation {
    condition     = var.reconcile_max_attempts >= 5 && var.reconcile_max_attempts <= 100
    error_message = "reconcile_max_attempts must be between 5 and 100 (Pub/Sub's limits for dead lettering)."
  }
}

variable "continuation_backoff_seconds" {
  description = "Retry backoff of the reconcile subscription (seconds): the delay between deliveries of a message reconcile refused, which is how a continuation waits until it is due (min ≈ its precision, max ≈ the cost of a long wait, one refusal per max)."
  type = object({
    min = number
    max = number
  })
  default = { min = 2, max = 60 }

  validation {
    condition     = var.continuation_backoff_seconds.min >= 0 && var.continuation_backoff_seconds.min <= var.continuation_backoff_seconds.max && var.continuation_backoff_seconds.max <= 600
    error_message = "continuation_backoff_seconds needs 0 <= min <= max <= 600 (Pub/Sub's limits)."
  }
}

variable "step_budget_seconds" {
  description = "How long one reconcile step may work (health polls included) before it records what it waits for and schedules its continuation (TIDECD_STEP_BUDGET)."
  type        = number
  default     = 10

  validation {
    condition     = var.step_budget_seconds >= 1 && var.step_budget_seconds <= 60
    error_message = "step_budget_seconds must be between 1 and 60 (a step that must wait longer schedules its continuation)."
  }
}

variable "enable_apis" {
  description = "Enable the Google APIs tidecd uses (Cloud Functions, Run, Build, Artifact Registry, Pub/Sub, Scheduler, Secret Manager, IAM, Logging); turn off when a platform team manages them."
  type        = bool
  default     = true
}

variable "labels" {
  description = "Labels added to every resource that takes labels."
  type        = map(string)
  default     = {}
}

variable "public_url" {
  description = "The dashboard's public base URL (the api function's URL, or a domain in front of it); GitHub commit statuses and notifications link to <public_url>/ui/apps/<app>. Empty: no links."
  type        = string
  default     = ""

  validation {
    condition     = var.public_url == "" || can(regex("^https://", var.public_url))
    error_message = "public_url must be empty or an https:// URL."
  }
}

variable "github_api_url" {
  description = "GitHub's REST API for commit statuses, deployments and PR previews (GitHub Enterprise: https://HOST/api/v3)."
  type        = string
  default     = "https://api.github.com"
}

variable "audit_log_projects" {
  description = "Projects of the GKE clusters tidecd deploys to: each gets a Log Router sink sending its Admin Activity audit logs of k8s.io (always on, free) to the audit topic, pushed to the webhook function, so drift is noticed in seconds. Empty: none (the poll notices drift)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for p in var.audit_log_projects : can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", p))])
    error_message = "audit_log_projects must be project IDs (6-30 characters: lowercase letters, digits, hyphens)."
  }
}

variable "gke_projects" {
  description = "Projects of GKE clusters that reconcile reaches with its own Google identity (cluster Secrets with execProviderConfig argocd-k8s-auth gcp or gke-gcloud-auth-plugin): its service account gets roles/container.clusterViewer there, enough to authenticate; bind its e-mail in each cluster's RBAC for what it may change. Empty: none (cluster Secrets carry their own credentials)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for p in var.gke_projects : can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", p))])
    error_message = "gke_projects must be project IDs (6-30 characters: lowercase letters, digits, hyphens)."
  }
}

variable "artifact_registry_projects" {
  description = "Projects whose Artifact Registry notifications (their `gcr` Pub/Sub topic) reach the webhook function: a pushed tag is checked by the image updater at once. The topic must exist (Artifact Registry creates it with its API). Empty: none (the images tick finds new tags)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for p in var.artifact_registry_projects : can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", p))])
    error_message = "artifact_registry_projects must be project IDs (6-30 characters: lowercase letters, digits, hyphens)."
  }
}
