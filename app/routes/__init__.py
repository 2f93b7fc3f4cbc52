"""HTTP and websocket routes, one module per resource; what they share is app.deps."""
