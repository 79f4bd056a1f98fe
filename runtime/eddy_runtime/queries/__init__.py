"""Interactive queries: where a key lives (routing), the runners' read-only HTTP server, and a
Python client."""
