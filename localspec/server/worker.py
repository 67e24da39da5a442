"""One generation at a time: a worker thread runs it, and each request's coroutine receives its
items (Pieces, then the Reply) through a Job."""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator

from fastapi import Request

from ..config import worded
from ..session import Reply
from .types import SERVER_NAMES, ApiError

log = logging.getLogger("localspec.server")
DONE = object()      # end of a job's items
POLL_S = 0.25        # how often a waiting request checks that its client is still there


class Job:
    """One request's generation: items cross from the worker thread to the request's coroutine."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str = ""):
        self.loop, self.name = loop, name  # name: the response id, for the log
        self.queue: asyncio.Queue = asyncio.Queue()
        self.cancel = threading.Event()
        self.refusal: ApiError | None = None  # set when the server drops this job before it starts

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
                if isinstance(item, ApiError):
                    raise item
                if isinstance(item, Exception):
                    raise ApiError(500, f"the generation failed: {worded(item, SERVER_NAMES)}") from item
                if item is not None:
                    yield item
        finally:
            self.cancel.set()  # a no-op once the generation is over


class Worker:
    """Runs one generation at a time on the pair; up to max_queue more requests wait their turn."""

    def __init__(self, max_queue: int, on_reply: Callable[[Job, Reply], None] = lambda job, reply: None):
        """on_reply(job, reply) is called in the worker thread as each generation ends (logs, metrics)."""
        self.max_queue, self.on_reply = max_queue, on_reply
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="localspec-generate")
        self.jobs: set[Job] = set()  # running and waiting; changed on the event loop only
        self.served = self.cancelled = 0

    def submit(self, work: Callable[[threading.Event], Iterator], name: str = "") -> Job:
        """Queue work(cancel) -> items; ApiError 503 when max_queue requests already wait."""
        waiting = len(self.jobs) - 1
        if waiting >= self.max_queue:
            raise ApiError(503, f"the server is busy: one generation runs and {waiting} wait (--max-queue "
                           f"{self.max_queue}); retry shortly", code="queue_full",
                           headers={"Retry-After": str(max(1, waiting))})
        job = Job(asyncio.get_running_loop(), name)
        self.jobs.add(job)
        future = job.loop.run_in_executor(self.executor, self._run, job, work)
        future.add_done_callback(lambda _: self.jobs.discard(job))
        return job

    def _run(self, job: Job, work: Callable[[threading.Event], Iterator]) -> None:
        """In the worker thread: feed the job its items, then DONE; skip a job whose client left."""
        try:
            if job.cancel.is_set():
                self.cancelled += 1
                if job.refusal is not None:
                    job.put(job.refusal)
                return
            for item in work(job.cancel):
                if isinstance(item, Reply):
                    self.served += 1
                    self.cancelled += item.finish_reason == "cancelled"
                    self.report(job, item)
                job.put(item)
        except Exception as e:  # noqa: BLE001 - handed to the request, which answers it
            job.put(e)
        finally:
            job.put(DONE)

    def report(self, job: Job, reply: Reply) -> None:
        """on_reply, whose failure (a bug in the metrics) must not cost the client its answer."""
        try:
            self.on_reply(job, reply)
        except Exception:  # noqa: BLE001
            log.exception("recording %s failed", job.name)

    def status(self) -> dict:
        return {"busy": bool(self.jobs), "queued": max(0, len(self.jobs) - 1), "max_queue": self.max_queue,
                "served": self.served, "cancelled": self.cancelled}

    def cancel_all(self, reason: str = "the server is shutting down") -> None:
        """Stop the running generation (it ends as cancelled) and refuse the waiting ones: each gets
        a 503 naming the reason (a stream: an error event before [DONE])."""
        for job in list(self.jobs):
            job.refusal = ApiError(503, f"{reason}; the request was not started, retry it on another "
                                   "server or once this one is back", code="server_shutting_down")
            job.cancel.set()

    def shutdown(self) -> None:
        self.cancel_all()
        self.executor.shutdown(wait=True, cancel_futures=True)

