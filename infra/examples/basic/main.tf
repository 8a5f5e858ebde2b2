# The smallest installation: tidecd in one project, reading its config from a git repository.
#
#   make package                                   # builds dist/tidecd-functions.zip
#   cd infra/examples/basic
#   cp terraform.tfvars.example terraform.tfvars    # then edit it
#   terraform init && terraform apply
#
# See infra/README.md for the secrets to add and the GitHub webhook to wire.

terraform {
  required_version = ">= 1.5.0"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 6.0, < 8.0"
    }
  }

  # Keep the state in a bucket of its own (create it once, by hand):
  # backend "gcs" {
  #   bucket = "acme-terraform-state"
  #   prefix = "tidecd"
  # }
}

provider "google" {
  project = var.project_id
  region  = var.region
}

variable "project_id" {
  description = "Project to install tidecd into."
  type        = string
}

variable "region" {
  description = "Region of the functions and buckets."
  type        = string
  default     = "europe-west1"
}

variable "config_source" {
  description = "TIDECD_CONFIG: REPO_URL#REF:PATH of the Application and AppProject manifests."
  type        = string
}

module "tidecd" {
  source = "../.."

  project_id    = var.project_id
  region        = var.region
  config_source = var.config_source
  name_prefix   = "tidecd"

  # Large charts render faster with more memory; the other functions keep their defaults.
  function_sizes = {
    reconcile = { memory = "4Gi", cpu = "2" }
  }
}

output "webhook_url" {
  description = "Payload URL for the GitHub webhook."
  value       = module.tidecd.webhook_url
}

output "api_url" {
  description = "Base URL of the tidecd api."
  value       = module.tidecd.api_url
}

output "secret_ids" {
  description = "Secrets to add versions to before the functions can start."
  value       = module.tidecd.secret_ids
}
