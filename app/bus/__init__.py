"""The fleet bus: NATS JetStream between producers (nodes) and dashboards, per-step
summaries for every node and full detail on demand from each node's flight recorder."""
