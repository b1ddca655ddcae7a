"""The distributed runtime on NATS: the server for development (`nats_server`),
connecting with retry (`connect`), the names everything meets under
(`subjects`), worker leases (`lease`), the worker side (`worker`), and the
frontend side: discovery of workers (`discovery`) and one request's stream
to a remote worker (`remote`)."""
