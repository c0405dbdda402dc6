"""The one request path: resolve, produce or find, record, stream; the service and its wiring."""
