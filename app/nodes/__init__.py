"""Producers as nodes: ingest of frames pushed over /ws/ingest, the `batchscope engine
--push` producer, and the control channel that drives whichever engine owns a session."""
