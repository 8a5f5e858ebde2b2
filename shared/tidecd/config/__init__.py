"""What users write, as Argo CD writes it: loading, schema, the typed model, argocd-cm and ApplicationSets."""
