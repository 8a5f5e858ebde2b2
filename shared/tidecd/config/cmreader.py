"""Reading the keys of one of Argo CD's settings ConfigMaps (argocd-cm, argocd-notifications-cm): YAML values
within tidecd's limits, and problems that name the file, the ConfigMap and the key."""

from __future__ import annotations

from typing import Any

import yaml

from tidecd.base import limits
from tidecd.base.errors import LimitExceeded


class ConfigMapReader:
    def __init__(self, origin: str, name: str, problems: list[str]) -> None:
        self.origin, self.name, self.problems = origin, name, problems

    def error(self, key: str, message: str) -> None:
        self.problems.append(f"{self.origin}: ConfigMap/{self.name}: data.{key}: {message}")

    def yaml(self, key: str, text: str) -> Any:
        try:
            return limits.load_yaml(text, f"{self.origin}: data.{key}")
        except yaml.YAMLError as exc:
            line = getattr(getattr(exc, "problem_mark", None), "line", -1) + 1
            self.error(key, f"YAML syntax error{f' on line {line}' if line > 0 else ''}")
        except LimitExceeded as exc:
            self.error(key, str(exc))
        return None

    def strings(self, key: str, value: Any, field: str) -> tuple[str, ...] | None:
        """A list of strings (None: absent is empty); None and a problem when it is something else."""
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.error(key, f"{field}: expected a list of strings")
            return None
        return tuple(value)

    def texts(self, key: str, value: Any, field: str) -> tuple[str, ...]:
        """As `strings`, empty when it is not a list of strings."""
        return self.strings(key, value, field) or ()
