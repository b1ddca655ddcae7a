"""Transports of the one engine contract (EngineRequest in, EngineOutput
stream out): `nats/` between frontends and workers on many machines,
`socket/` between the HTTP processes of `rotor run --http-workers` and its
engine process. Both hand a request's messages to one reader (`stream`)."""
