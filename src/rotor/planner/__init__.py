"""`rotor planner`: sizing a model's worker pools to its load.

Every `--interval` the planner reads what frontends and workers publish on
NATS (fleet.py, observation.py), predicts the next interval (predict.py),
sizes each pool (load.py without a profile, throughput.py with one),
checks the guard rails (guard.py) and asks a connector (connectors/) for
the new worker counts: local processes, a Kubernetes Deployment's scale, or
a NATS key an external system acts on.
"""
