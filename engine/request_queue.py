"""Waiting queues behind one interface: FCFS (a deque) and priority (a heap)."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Protocol

from engine.config import SchedulingPolicy
from engine.request import Request


class RequestQueue(Protocol):
    def add_request(self, request: Request) -> None: ...
    def pop_request(self) -> Request: ...
    def peek_request(self) -> Request: ...
    def prepend_request(self, request: Request) -> None: ...
    def remove_requests(self, requests: Iterable[Request]) -> None: ...
    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...
    def __iter__(self) -> Iterator[Request]: ...


class FCFSRequestQueue(deque[Request]):
    """Arrival order; preempted requests go back to the front."""

    def add_request(self, request: Request) -> None:
        self.append(request)

    def pop_request(self) -> Request:
        return self.popleft()

    def peek_request(self) -> Request:
        return self[0]

    def prepend_request(self, request: Request) -> None:
        self.appendleft(request)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        drop = set(requests)
        keep = [r for r in self if r not in drop]
        self.clear()
        self.extend(keep)

    def __bool__(self) -> bool:
        return len(self) > 0


class PriorityRequestQueue:
    """Lowest (priority, arrival) first. There is no 'front': prepend is a push."""

    def __init__(self) -> None:
        self._heap: list[Request] = []

    def add_request(self, request: Request) -> None:
        heapq.heappush(self._heap, request)

    def pop_request(self) -> Request:
        return heapq.heappop(self._heap)

    def peek_request(self) -> Request:
        return self._heap[0]

    def prepend_request(self, request: Request) -> None:
        self.add_request(request)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        drop = set(requests)
        self._heap = [r for r in self._heap if r not in drop]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __iter__(self) -> Iterator[Request]:
        """In pop order (a sorted copy), so views list the queue as it will drain."""
        return iter(sorted(self._heap))


def create_request_queue(policy: SchedulingPolicy) -> RequestQueue:
    if policy is SchedulingPolicy.PRIORITY:
        return PriorityRequestQueue()
    return FCFSRequestQueue()
