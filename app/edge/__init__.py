"""The edge: what every request and websocket message passes before any route sees it
(allowed hosts, bounded bodies and JSON, clean paths, socket input and close codes)."""
