"""The self-healing controller that runs on the head: observe (observe.py) -> decide (decide.py, pure) -> act
(act.py), with its state in one ledger (ledger.py, DynamoDB with conditional writes and a lease), launches by EC2
Fleet (fleet.py) and the membership object in S3 (membership.py). AWS clients are injected, never created here."""
