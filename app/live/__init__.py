"""The live path in the web process: the hub that fans frames out, the local engine
thread and its sink, the PostgreSQL relay between dashboards and the Prometheus metrics."""
