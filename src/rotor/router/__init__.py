"""Routing requests over a pool of workers: the modes (`modes`), and the pool
that routes, streams and migrates (`pool`)."""
