"""Where frontends and workers meet on NATS: one place for every subject and
bucket name, so both sides always agree.

- `rotor.worker.<id>.generate`  a request (msgpack) for the worker; outputs go
  to the reply subject it names, in order, numbered.
- `rotor.worker.<id>.abort`     a request id to stop now.
- `rotor.worker.<id>.embed`     request/reply: inputs' token ids → their vectors (or an error).
- `rotor.worker.<id>.score`     request/reply: pairs' token ids → their scores (or an error).
- `rotor.worker.<id>.kv`        request/reply: the worker's KV snapshot (resync).
- `rotor.worker.<id>.kv_fetch`  request/reply: the KV blocks a prefill pinned
  (`{"transfer_id", "hashes"}` → `{"hashes": the ones handed over}`).
- `rotor.worker.<id>.unread.<frontend>`  the reply subject of the worker's
  batches to that frontend: nothing is sent there but NATS's "no responders"
  when nobody reads `rotor.steps.<frontend>` (the frontend is gone).
- `rotor.lease.<id>`            each lease renewal (and withdrawal), as it happens.
- `rotor.kv.<id>`               the worker's KV events.
- `rotor.resp.<frontend>.<rid>` one request's output stream.
- `rotor.steps.<frontend>`      a worker's stream messages for that frontend's
  requests, batched: all that one turn of its event loop (an engine step)
  produced, in one message (a request that names it in its `rotor-steps` header).
- `rotor.stats.<frontend>`      a frontend's figures of the last second
  (runtime/nats/frontend_stats.py).
- KV bucket `rotor_workers`     the leases, for a frontend that starts later.
- object store `rotor_cards`    model cards (with tokenizers) by content hash.
- object store `rotor_media`    a request's images too large for its message, by
  content hash, for a while (runtime/nats/media.py); the request's `rotor-media`
  header names those it carries with `data=None`.
- KV bucket `rotor_planner`     `rotor planner --connector virtual`: each pool's decision
  and an external system's acknowledgement of it (planner/connectors/virtual.py).
- KV bucket `rotor_responses`   stored Responses-API responses, shared by every frontend
  (runtime/nats/response_bucket.py).
"""

from __future__ import annotations

WORKERS_BUCKET = "rotor_workers"
CARDS_STORE = "rotor_cards"
MEDIA_STORE = "rotor_media"
# The header of a generate request whose images (some) travel in MEDIA_STORE:
# their content hashes, comma-separated.
MEDIA_HEADER = "rotor-media"
LEASE_PREFIX = "rotor.lease."
KV_PREFIX = "rotor.kv."
STATS_PREFIX = "rotor.stats."
STEPS_PREFIX = "rotor.steps."
# The header of a generate request whose frontend takes its stream in batches
# (`steps`): its value is that subject.
STEPS_HEADER = "rotor-steps"
PLANNER_BUCKET = "rotor_planner"
RESPONSES_BUCKET = "rotor_responses"


def generate(worker_id: str) -> str:
    return f"rotor.worker.{worker_id}.generate"


def embed(worker_id: str) -> str:
    return f"rotor.worker.{worker_id}.embed"


def score(worker_id: str) -> str:
    return f"rotor.worker.{worker_id}.score"


def abort(worker_id: str) -> str:
    return f"rotor.worker.{worker_id}.abort"


def kv_fetch(worker_id: str) -> str:
    """request/reply: a decode worker takes the KV blocks a prefill pinned for it."""
    return f"rotor.worker.{worker_id}.kv_fetch"


def unread(worker_id: str, frontend_id: str) -> str:
    """The reply subject of a worker's batches to a frontend."""
    return f"rotor.worker.{worker_id}.unread.{frontend_id}"


def unread_all(worker_id: str) -> str:
    return f"rotor.worker.{worker_id}.unread.*"


def kv_snapshot(worker_id: str) -> str:
    return f"rotor.worker.{worker_id}.kv"


def lease(worker_id: str) -> str:
    return LEASE_PREFIX + worker_id


def kv_events(worker_id: str) -> str:
    return KV_PREFIX + worker_id


def responses(frontend_id: str) -> str:
    """The wildcard a frontend listens on for all its requests' outputs."""
    return f"rotor.resp.{frontend_id}.*"


def response(frontend_id: str, request_id: str) -> str:
    return f"rotor.resp.{frontend_id}.{request_id}"


def steps(frontend_id: str) -> str:
    """Where workers send a frontend its requests' stream messages, batched."""
    return STEPS_PREFIX + frontend_id


def frontend_stats(frontend_id: str) -> str:
    """A frontend's figures of the last second, for the planner."""
    return STATS_PREFIX + frontend_id
