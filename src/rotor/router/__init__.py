"""Routing requests over a model's pool of workers: the modes (`modes`, `kv`
with its index and cost), the pool that routes, streams and migrates
(`pool`, `migration`), which workers are live (`discovery`), and keeping the
KV index in step with the workers' caches (`kv_sync`). Nothing here knows
NATS: the runtime fills the interfaces these modules declare."""
