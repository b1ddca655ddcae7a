"""How the planner's decisions reach the fleet. Each connector sets a pool's
worker count; registering (a lease on NATS) is the workers' own business,
and the planner waits for it before its next action.

- `local`: `rotor worker` processes on this machine (local.py).
- `kubernetes`: a Deployment's `spec.replicas` per pool, by the scale
  subresource (kubernetes.py).
- `virtual`: each decision as a NATS KV key for an external system, which
  acknowledges it (virtual.py).
"""

from __future__ import annotations

from typing import Protocol

from rotor.planner.observation import PoolName, WorkerLoad


class ConnectorError(Exception):
    """A scale request that did not go through, with what the operator needs to know."""


class Connector(Protocol):
    name: str

    async def start(self) -> None:
        """Connect (and, for `local`, nothing is started yet)."""
        ...

    async def replicas(self, pool: PoolName) -> int | None:
        """The worker count this connector last set or found for the pool
        (Kubernetes: the Deployment's spec.replicas); None if it knows none."""
        ...

    async def scale(self, pool: PoolName, target: int, drain: list[WorkerLoad]) -> None:
        """Ask for `target` workers in `pool`. Scaling down, `drain` names the
        workers to remove, least loaded first (a connector that cannot pick,
        like Kubernetes's, ignores it). Returns once the request is made, not
        when the workers have registered or left. ConnectorError if refused."""
        ...

    async def stop(self) -> None:
        """The planner exits: `local` drains every worker it started; the others
        leave the fleet as it is."""
        ...
