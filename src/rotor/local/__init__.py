"""`rotor run --http-workers N`: the engine in one process, N HTTP processes
that reach it over a unix socket (the token contract in msgpack)."""
