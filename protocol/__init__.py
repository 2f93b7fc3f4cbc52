"""batchscope's wire protocol (docs/protocol.md), standard library only: the codes
(`codes`), the typed data of every frame (`wire`) and control message (`control`), the
envelope every frame travels in (`envelope`), the frame builders every producer calls
(`frames`) and how a session is named and described (`session`); and, for the transports on
both ends, how their asyncio tasks are ended for certain (`tasks`).

Our engine, the dashboard (`app`) and the vLLM adapter (`batchscope_vllm`) all import it;
it imports none of them, and both wheels ship it.
"""
