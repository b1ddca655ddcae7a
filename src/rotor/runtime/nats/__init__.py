"""The NATS transport: the server for development (`server`), connecting
(`connect`), the names everything meets under (`subjects`); the worker side
(`worker`: serve an engine, renew its lease, relay its KV events); the
frontend side: the request plane (`request_plane`, its stream messages in
`messages`), leases and cards (`leases`) and KV events (`kv_events`) handed
to the router."""
