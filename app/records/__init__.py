"""Recordings: the recorder that writes frames, replay, re-run under other knobs, export to
JSONL/Perfetto and import back."""
