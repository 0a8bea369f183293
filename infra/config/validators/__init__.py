"""Checks on a cluster config: one small rule per check, each returning Findings (`findings.py`).

`inputs.py` judges single values (the model's fields call it); `config_rules.py` relates several fields and
`type_rules.py` needs the instance types' facts; `metrics.py` is the observability section's values (durations, the
workspace ARN) and rules; `check.py` runs them all. The rules read the parsed model they are
given and the facts below it (infra/facts/), never the model's module for them. The AWS-backed checks (preflight,
infra/ops/preflight/) use the same Finding type so every report looks alike.
"""
