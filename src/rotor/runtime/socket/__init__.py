"""The unix-socket transport of `rotor run --http-workers N`: the engine in
one process (`server`), N HTTP processes that reach it (`client`), the frames
between them (`frames`)."""
