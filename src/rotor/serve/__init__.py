"""The composition root: typed configs in, a running system out. `build`
(model, engine, the frontend's view of the model), `run` (`rotor run`),
`frontend` (`rotor frontend`), `worker` (`rotor worker`, and its status
port in `worker_status`), the HTTP servers (`http`), N HTTP processes on one
port (`processes`, `http_processes`), the garbage collector of a started
server (`gc`), and `System` (a frontend with its in-process engines)."""
