"""Physical KV blocks: a free queue in eviction (LRU) order, ref counts, hash -> block map."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from engine.prefix_hash import BlockHash
from protocol.codes import BlockState

_FREE, _CACHED, _USED, _SHARED, _WITHHELD = (
    BlockState.FREE,
    BlockState.CACHED,
    BlockState.USED,
    BlockState.SHARED,
    BlockState.WITHHELD,
)


class KVCacheBlock:
    """One paged KV block. `block_hash` is set once the block is full and cached."""

    __slots__ = ("block_hash", "block_id", "is_null", "next_free", "owner", "prev_free", "ref_cnt")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: BlockHash | None = None
        self.is_null = False
        self.owner: str | None = None
        self.prev_free: KVCacheBlock | None = None
        self.next_free: KVCacheBlock | None = None

    def __repr__(self) -> str:
        return f"KVCacheBlock({self.block_id}, ref={self.ref_cnt}, hash={self.block_hash})"


class FreeKVCacheBlockQueue:
    """Doubly linked list of free blocks: evict from the head, free onto the tail."""

    def __init__(self, blocks: Sequence[KVCacheBlock]) -> None:
        self.num_free_blocks = 0
        self._head = KVCacheBlock(-1)
        self._tail = KVCacheBlock(-1)
        self._head.next_free = self._tail
        self._tail.prev_free = self._head
        self.append_n(blocks)

    def popleft(self) -> KVCacheBlock:
        block = self._head.next_free
        if block is None or block is self._tail:
            raise ValueError("no free blocks")
        self.remove(block)
        return block

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """The first n blocks, unlinked as one run (n popleft()s, one relink)."""
        if n > self.num_free_blocks:
            raise ValueError("no free blocks")
        out: list[KVCacheBlock] = []
        if n <= 0:
            return out
        append = out.append
        block = self._head.next_free
        for _ in range(n):
            assert block is not None
            append(block)
            nxt = block.next_free
            block.prev_free = block.next_free = None
            block = nxt
        assert block is not None
        self._head.next_free = block
        block.prev_free = self._head
        self.num_free_blocks -= n
        return out

    def remove(self, block: KVCacheBlock) -> None:
        prev, nxt = block.prev_free, block.next_free
        assert prev is not None and nxt is not None, "block is not in the free queue"
        prev.next_free = nxt
        nxt.prev_free = prev
        block.prev_free = block.next_free = None
        self.num_free_blocks -= 1

    def prepend_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Put blocks at the head, in this order (the first is evicted first)."""
        nxt = self._head.next_free
        assert nxt is not None
        prev = self._head
        for block in blocks:
            prev.next_free = block
            block.prev_free = prev
            prev = block
        prev.next_free = nxt
        nxt.prev_free = prev
        self.num_free_blocks += len(blocks)

    def append(self, block: KVCacheBlock) -> None:
        last = self._tail.prev_free
        assert last is not None
        last.next_free = block
        block.prev_free = last
        block.next_free = self._tail
        self._tail.prev_free = block
        self.num_free_blocks += 1

    def append_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Put blocks at the tail, in this order (as many append()s)."""
        if not blocks:
            return
        last = self._tail.prev_free
        assert last is not None
        for block in blocks:
            last.next_free = block
            block.prev_free = last
            last = block
        last.next_free = self._tail
        self._tail.prev_free = last
        self.num_free_blocks += len(blocks)

    def block_ids(self) -> list[int]:
        out: list[int] = []
        block = self._head.next_free
        while block is not None and block is not self._tail:
            out.append(block.block_id)
            block = block.next_free
        return out


class BlockPool:
    """All blocks of the pool. Block 0 is vLLM's null block and is never handed out."""

    def __init__(
        self, num_gpu_blocks: int, enable_caching: bool, unhashed_first: bool = False
    ) -> None:
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.unhashed_first = unhashed_first
        """vLLM 0.28+: freed blocks without a hash go to the head of the free queue."""
        self.blocks = [KVCacheBlock(i) for i in range(num_gpu_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        # hash -> {block_id: block}; duplicates can exist (two requests filled the
        # same content before either was cached); lookups return the first.
        self.cached_block_hash_to_block: dict[BlockHash, dict[int, KVCacheBlock]] = {}
        # hash -> the block a lookup returns (the first of its entry above), kept beside
        # the table so a prefix lookup is one dict get per block (the hot path of admission).
        self.first_cached_block: dict[BlockHash, KVCacheBlock] = {}
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True
        # Block ids whose state changed since the last `take_changed_block_ids`.
        self.changed_block_ids: set[int] = set()
        # Free blocks that still hold a cached hash (reusable by a prefix hit).
        self.num_cached_free_blocks = 0
        # Blocks taken out of service by a live KV pool limit (`set_limit`).
        self.withheld: list[KVCacheBlock] = []
        self._withhold_target = 0

    @property
    def num_usable_blocks(self) -> int:
        """Blocks in service: all but the null block, less any withheld by a limit."""
        return self.num_gpu_blocks - 1 - len(self.withheld)

    def set_limit(self, limit: int) -> None:
        """Serve at most `limit` usable blocks (0 = all). Blocks in use are withheld as
        they are freed, so lowering the limit under load provokes preemption live."""
        total = self.num_gpu_blocks - 1
        if not 0 <= limit <= total:
            raise ValueError(f"the KV pool limit must be between 1 and {total} (0 = no limit)")
        self._withhold_target = 0 if limit == 0 else total - limit
        while len(self.withheld) > self._withhold_target:
            block = self.withheld.pop()
            self.free_block_queue.append(block)
            self.changed_block_ids.add(block.block_id)
        self._withhold_free()

    def _withhold_free(self) -> None:
        queue = self.free_block_queue
        while len(self.withheld) < self._withhold_target and queue.num_free_blocks:
            block = queue.popleft()
            if block.block_hash is not None:
                self.num_cached_free_blocks -= 1
                self._evict_cached_block(block)
            self.withheld.append(block)
            self.changed_block_ids.add(block.block_id)

    def get_num_free_blocks(self) -> int:
        return self.free_block_queue.num_free_blocks

    def get_num_used_blocks(self) -> int:
        return self.num_usable_blocks - self.free_block_queue.num_free_blocks

    def get_usage(self) -> float:
        return 1.0 - self.get_num_free_blocks() / self.num_usable_blocks

    def get_cached_block(self, block_hash: BlockHash) -> KVCacheBlock | None:
        return self.first_cached_block.get(block_hash)

    def get_new_blocks(self, num_blocks: int, owner: str) -> list[KVCacheBlock]:
        if num_blocks > self.free_block_queue.num_free_blocks:
            raise ValueError(f"cannot get {num_blocks} free blocks from the pool")
        changed = self.changed_block_ids
        ret = self.free_block_queue.popleft_n(num_blocks)
        for block in ret:
            if block.block_hash is not None:
                self.num_cached_free_blocks -= 1
                self._evict_cached_block(block)
            block.ref_cnt = 1
            block.owner = owner
            changed.add(block.block_id)
        return ret

    def _evict_cached_block(self, block: KVCacheBlock) -> None:
        assert block.block_hash is not None
        block_hash = block.block_hash
        entry = self.cached_block_hash_to_block.get(block_hash)
        if entry is not None:
            entry.pop(block.block_id, None)
            if not entry:
                del self.cached_block_hash_to_block[block_hash]
                del self.first_cached_block[block_hash]
            elif self.first_cached_block[block_hash] is block:
                # The next duplicate in insertion order is what a lookup returns now.
                self.first_cached_block[block_hash] = next(iter(entry.values()))
        block.block_hash = None

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """A prefix-cache hit: take a reference, pulling free blocks out of the free queue."""
        for block in blocks:
            if block.ref_cnt == 0 and not block.is_null:
                self.free_block_queue.remove(block)
                if block.block_hash is not None:
                    self.num_cached_free_blocks -= 1
            block.ref_cnt += 1
            self.changed_block_ids.add(block.block_id)

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one reference each; blocks reaching 0 join the free queue in this order
        (at the tail; with `unhashed_first`, blocks without a hash at the head)."""
        changed = self.changed_block_ids
        first: list[KVCacheBlock] = []
        last: list[KVCacheBlock] = []
        unhashed = first if self.unhashed_first else last
        num_cached = 0
        for block in ordered_blocks:
            block.ref_cnt -= 1
            changed.add(block.block_id)
            if block.ref_cnt == 0 and not block.is_null:
                if block.block_hash is not None:
                    num_cached += 1
                    last.append(block)
                else:
                    unhashed.append(block)
        self.num_cached_free_blocks += num_cached
        queue = self.free_block_queue
        queue.append_n(last)
        if first:
            queue.prepend_n(first)
        if len(self.withheld) < self._withhold_target:
            self._withhold_free()

    def cache_full_blocks(
        self,
        blocks: Sequence[KVCacheBlock],
        block_hashes: Sequence[BlockHash],
        num_cached_blocks: int,
        num_full_blocks: int,
    ) -> None:
        """Register blocks [num_cached_blocks, num_full_blocks) under their hashes."""
        table = self.cached_block_hash_to_block
        first = self.first_cached_block
        for i in range(num_cached_blocks, num_full_blocks):
            block = blocks[i]
            if block.is_null:
                continue
            assert block.block_hash is None
            block_hash = block_hashes[i]
            block.block_hash = block_hash
            entry = table.get(block_hash)
            if entry is None:
                table[block_hash] = {block.block_id: block}
                first[block_hash] = block
            else:
                entry[block.block_id] = block
            self.changed_block_ids.add(block.block_id)

    def take_changed_block_ids(self) -> set[int]:
        changed = self.changed_block_ids
        self.changed_block_ids = set()
        return changed

    def take_block_changes(self) -> list[tuple[int, BlockState, str | None, int]]:
        """(block_id, state, owner, ref_cnt) of each block changed since the last take, by
        block id. States: free | cached (free, still reusable by hash) | used | shared
        (ref_cnt > 1) | withheld (out of service under a KV pool limit)."""
        blocks = self.blocks
        rows: list[tuple[int, BlockState, str | None, int]] = []
        append = rows.append
        for i in sorted(self.take_changed_block_ids()):
            block = blocks[i]
            ref_cnt = block.ref_cnt
            if ref_cnt == 0:
                if block.prev_free is None and not block.is_null:
                    state = _WITHHELD
                elif block.block_hash is not None:
                    state = _CACHED
                else:
                    state = _FREE
            else:
                state = _SHARED if ref_cnt > 1 else _USED
            append((i, state, block.owner, ref_cnt))
        return rows
