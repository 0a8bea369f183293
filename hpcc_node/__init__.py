"""What runs on the nodes: the membership agent, the head's controller and the health checks, and what they share.

Standard library only, Python >= 3.8 (the images span Ubuntu 22.04/24.04 and Amazon Linux 2023). It ships in the
cluster's bundle; from the rest of the repository it may import only the stdlib-only modules of `infra/` that the
bundle carries with it (infra/settings_schema.py and its like), never the Pulumi program or the operator's commands.
"""
