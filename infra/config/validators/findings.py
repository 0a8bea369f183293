from __future__ import annotations

from dataclasses import dataclass

ERROR, WARNING, INFO = "error", "warning", "info"


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
