"""One generation at a time: a worker thread runs it, and each request's coroutine receives its
items (Pieces, then the Reply) through a Job."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator

from fastapi import Request

from ..session import Reply
from .types import ApiError

DONE = object()      # end of a job's items
POLL_S = 0.25        # how often a waiting request checks that its client is still there


class Job:
    """One request's generation: items cross from the worker thread to the request's coroutine."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()
        self.cancel = threading.Event()

    def put(self, item) -> None:
        """From the worker thread: hand an item (a Piece, the Reply, an exception or DONE) over."""
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    async def items(self, request: Request):
        """The generation's items as they come; stops, cancelling the generation, if the client leaves."""
        try:
            while True:
                try:
                    item = await asyncio.wait_for(self.queue.get(), POLL_S)
                except asyncio.TimeoutError:
                    item = None
                if await request.is_disconnected() or item is DONE:
                    return
                if isinstance(item, Exception):
                    raise ApiError(500, f"the generation failed: {item}") from item
                if item is not None:
                    yield item
        finally:
            self.cancel.set()  # a no-op once the generation is over


class Worker:
    """Runs one generation at a time on the pair; up to max_queue more requests wait their turn."""

    def __init__(self, max_queue: int):
        self.max_queue = max_queue
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="localspec-generate")
        self.jobs: set[Job] = set()  # running and waiting; changed on the event loop only
        self.served = self.cancelled = 0

    def submit(self, work: Callable[[threading.Event], Iterator]) -> Job:
        """Queue work(cancel) -> items; ApiError 503 when max_queue requests already wait."""
        waiting = len(self.jobs) - 1
        if waiting >= self.max_queue:
            raise ApiError(503, f"the server is busy: one generation runs and {waiting} wait (--max-queue "
                           f"{self.max_queue}); retry shortly", code="queue_full",
                           headers={"Retry-After": str(max(1, waiting))})
        job = Job(asyncio.get_running_loop())
        self.jobs.add(job)
        future = job.loop.run_in_executor(self.executor, self._run, job, work)
        future.add_done_callback(lambda _: self.jobs.discard(job))
        return job

    def _run(self, job: Job, work: Callable[[threading.Event], Iterator]) -> None:
        """In the worker thread: feed the job its items, then DONE; skip a job whose client left."""
        try:
            if job.cancel.is_set():
                self.cancelled += 1
                return
            for item in work(job.cancel):
                if isinstance(item, Reply):
                    self.served += 1
                    self.cancelled += item.finish_reason == "cancelled"
                job.put(item)
        except Exception as e:  # noqa: BLE001 - handed to the request, which answers it
            job.put(e)
        finally:
            job.put(DONE)

    def status(self) -> dict:
        return {"busy": bool(self.jobs), "queued": max(0, len(self.jobs) - 1), "max_queue": self.max_queue,
                "served": self.served, "cancelled": self.cancelled}

    def cancel_all(self) -> None:
        """Stop the running generation and drop the waiting ones (their streams end at once)."""
        for job in list(self.jobs):
            job.cancel.set()

    def shutdown(self) -> None:
        self.cancel_all()
        self.executor.shutdown(wait=True, cancel_futures=True)

