"""A worker's lease: who it is, what it serves, where its card is, how loaded
it is, whether it still takes requests, and whether its engine answers. Workers renew it every
`RENEW_S`; a frontend that has not heard of a worker for `LEASE_TTL_S`
counts it gone (a watched timestamp, kept by each frontend on its own
clock; the bucket's max age removes stale entries for later readers)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

import msgpack

from rotor.protocol.engine import EngineState

RENEW_S = 1.0
LEASE_TTL_S = 5.0

Status = Literal["serving", "leaving"]
# What a worker does for its model's requests: all of a request (agg), only
# its prefill (prefill: a decode worker fetches the KV blocks), or the rest
# of it after a prefill worker's (decode; it can also prefill itself).
Role = Literal["agg", "prefill", "decode"]
ROLES = ("agg", "prefill", "decode")
_STATE_FIELDS = tuple(f.name for f in dataclasses.fields(EngineState))


@dataclass
class Lease:
    worker_id: str
    model: str
    card: str  # the card's name in the object store (its content hash)
    compat: str  # tokenizer + template hash: cards of one model must agree on it
    address: str  # host:pid, for people reading /health
    status: Status = "serving"
    state: EngineState = field(default_factory=EngineState)
    role: Role = "agg"
    # The LoRA adapters it holds: name → the directory it loaded it from
    loras: dict[str, str] = field(default_factory=dict)
    # False while its engine fails its canary (runtime/canary.py): alive,
    # but wedged; frontends route nothing to it until a canary answers. A
    # lease without the field (an older worker) is healthy; a frontend that
    # predates it ignores it, and the worker refuses that frontend's
    # requests as "unavailable" (they move to another worker).
    healthy: bool = True

    def encode(self) -> bytes:
        return msgpack.packb(
            {
                "worker_id": self.worker_id,
                "model": self.model,
                "card": self.card,
                "compat": self.compat,
                "address": self.address,
                "status": self.status,
                "role": self.role,
                "loras": self.loras,
                "healthy": self.healthy,
                "state": {k: getattr(self.state, k) for k in _STATE_FIELDS},
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> Lease:
        """ValueError for anything that is not a lease; unknown fields are ignored."""
        try:
            m = msgpack.unpackb(data, raw=False)
            raw_state = m.get("state") or {}
            state = EngineState(**{k: raw_state[k] for k in _STATE_FIELDS if k in raw_state})
            status = m.get("status", "serving")
            if status not in ("serving", "leaving"):
                raise ValueError(f"unknown lease status {status!r}")
            role = m.get("role", "agg")
            if role not in ROLES:
                raise ValueError(f"unknown worker role {role!r}")
            loras = m.get("loras") or {}
            if not isinstance(loras, dict):
                raise ValueError("loras must be a map of name to directory")
            healthy = m.get("healthy", True)
            if not isinstance(healthy, bool):
                raise ValueError("healthy must be true or false")
            return cls(
                str(m["worker_id"]),
                str(m["model"]),
                str(m["card"]),
                str(m["compat"]),
                str(m.get("address", "")),
                status,
                state,
                role,
                {str(k): str(v) for k, v in loras.items()},
                healthy,
            )
        except (KeyError, TypeError, ValueError, msgpack.UnpackException) as e:
            raise ValueError(f"not a lease: {e}") from None
