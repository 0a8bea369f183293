from __future__ import annotations

from dataclasses import dataclass

ERROR, WARNING, INFO = "error", "warning", "info"
# Ends a message whose bad value must not be printed (it may be a secret): problems.py then leaves out its "got ...".
NOT_SHOWN = "(the value is not shown: it may be a secret)"


@dataclass(frozen=True)
class Finding:
    severity: str
    field: str  # config path, e.g. cluster.fsx.storageCapacityGiB
    message: str  # what is wrong and what to do

    @property
    def is_error(self) -> bool:
        return self.severity == ERROR

    def __str__(self) -> str:
        return f"{self.severity}: {self.field}: {self.message}"
