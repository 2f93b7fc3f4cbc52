"""The event protocol v1 (docs/protocol.md): envelopes, frame payloads and models, and the
SessionState fold of a session's frames. Imports nothing heavy here: batchscope_vllm uses
the stdlib-only modules of this package without the web stack."""
