"""`rotor bench`: a load generator for any OpenAI-compatible server, and its report.

The modules each do one job: `args` (flags → BenchConfig), `workload` (seeded
prompts), `mix` (the long/short prompt-length classes), `tokens` (text of a
length in the server's tokens), `trace` (replay at a trace's timestamps, a
reader per format) and `mooncake` (the Mooncake reader), `arrivals`
(open-loop schedules), `http` (a small streaming HTTP/1.1 client), `client`
(one request per API, timed), `loop` (closed and open loops), `stats`
(percentiles, goodput, the per-level summary), `cpu` (server CPU from /proc),
`results` (results.json), `table` (the terminal table), `svg` and `html`
(report.html), `progress` (the live display), `main` (the command);
`profiling` measures one worker with them for `rotor planner profile`.
Nothing heavy is imported here so that `rotor --help` stays fast.
"""
