"""The app's side of the wire protocol (protocol/, docs/protocol.md) for session frames:
convert engine events to frames, validate received frames with pydantic, and fold a
session's frames into its SessionState."""
