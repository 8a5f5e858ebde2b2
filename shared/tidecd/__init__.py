"""tidecd: GitOps continuous delivery for Kubernetes, as stateless functions.

Data flows source → render → diff → health → sync → state; see the module of each name.
"""

__version__ = "0.1.0"
