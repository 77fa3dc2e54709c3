"""`replog console`: a web UI for operators, as its own process (docs/console.md).

It talks to the cluster only through the public gRPC API (the Python client, plus the
standard `grpc.health.v1` and `Admin.GetMetadata` of each node), so it works with any node
and with TLS and token authentication, exactly like the CLI. Pages are rendered on the
server (Starlette + Jinja2, served by uvicorn); live parts re-fetch their HTML with a few
lines of `fetch()` (static/console.js) and the record browser follows new records over
Server-Sent Events.

Modules: `cluster` (what the cluster page and the topic list show: every node's health and
metadata, merged), `display` (records as text, JSON or hex), `forms` (validation of every
browser input), `security` (host check, CSRF, response headers), `app` (routes and pages),
`server` (the process: options, uvicorn, ready-file).
"""
