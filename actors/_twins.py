"""One body, two forms: a facade method's blocking and coroutine twins from one generator.

A facade method is written once, as a generator that yields *steps* and returns
the answer: :class:`Await` (wait for a ``concurrent.futures.Future``),
:class:`Blocking` (work that may block: store calls) and :class:`Detached`
(work that must go on when the awaiting coroutine is cancelled). :func:`twins`
builds from it the ``_sync`` method, which runs every step on the calling
thread, and the coroutine, which awaits every step without blocking its event
loop (blocking work runs on ``asyncio.to_thread``, never on the loop). An
exception a step raises is raised inside the body, at its ``yield``; one the
body does not catch reaches the caller of either twin alike. There is one
body, so the twins cannot drift.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Concatenate, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


class Await:
    """The future's result. With ``timeout`` (seconds), ``TimeoutError`` is raised into
    the body when the future has not resolved in time; the coroutine form then waits
    through ``asyncio.shield``, so giving up never cancels the future (it may be shared
    with other waiters)."""

    __slots__ = ("future", "timeout")

    def __init__(self, future: concurrent.futures.Future[Any], timeout: float | None = None):
        self.future = future
        self.timeout = timeout

    def run(self) -> Any:
        return self.future.result(timeout=self.timeout)

    async def run_async(self) -> Any:
        future = self.future
        if future.done():
            # A wrapped future resolves only on the loop's next pass, which ``wait_for``
            # with a zero timeout would not give it: read a resolved one at once.
            return future.result()
        if self.timeout is None:
            return await asyncio.wrap_future(future)
        return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), self.timeout)


class Blocking:
    """``fn(*args)``: inline in the blocking twin, on ``asyncio.to_thread`` in the coroutine."""

    __slots__ = ("args", "fn")

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self.fn = fn
        self.args = args

    def run(self) -> Any:
        return self.fn(*self.args)

    async def run_async(self) -> Any:
        return await asyncio.to_thread(self.fn, *self.args)


class DetachedThreads:
    """The threads :class:`Detached` steps started for one owner (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []


class Detached:
    """``fn()``: inline in the blocking twin; in the coroutine, on a thread of its own
    (non-daemon, named ``name``) that the coroutine awaits shielded, so cancelling the
    coroutine loses nothing: ``fn`` goes on, and before it answers it joins the
    detached threads of the same owner that were still running when it began (so no
    thread outlives the last call)."""

    __slots__ = ("fn", "name", "owner")

    def __init__(self, fn: Callable[[], Any], *, name: str, owner: DetachedThreads) -> None:
        self.fn = fn
        self.name = name
        self.owner = owner

    def run(self) -> Any:
        return self.fn()

    async def run_async(self) -> Any:
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        owner = self.owner
        with owner.lock:
            earlier = list(owner.threads)

        def main() -> None:
            value: Any = None
            error: BaseException | None = None
            try:
                value = self.fn()
            except BaseException as exc:  # answered to the awaiting coroutine
                error = exc
            for thread in earlier:
                thread.join(1.0)
            if error is None:
                done.set_result(value)
            else:
                done.set_exception(error)

        thread = threading.Thread(target=main, name=self.name, daemon=False)
        with owner.lock:
            owner.threads = [t for t in owner.threads if t.is_alive()]
            owner.threads.append(thread)
        thread.start()
        value = await asyncio.shield(asyncio.wrap_future(done))
        thread.join(1.0)  # it resolved ``done`` as its last step
        return value


Step = Await | Blocking | Detached
Steps = Generator[Step, Any, R]
"""A facade method's body: yields steps, is sent each step's value, returns the answer."""


def run_blocking(body: Steps[R]) -> R:
    """Drive ``body`` on the calling thread."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = body.send(value) if error is None else body.throw(error)
        except StopIteration as stop:
            result: R = stop.value
            return result
        value, error = None, None
        try:
            value = step.run()
        except BaseException as exc:  # raised into the body at its yield
            error = exc


async def run_async(body: Steps[R]) -> R:
    """Drive ``body`` on the running event loop, never blocking it."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = body.send(value) if error is None else body.throw(error)
        except StopIteration as stop:
            result: R = stop.value
            return result
        value, error = None, None
        try:
            value = await step.run_async()
        except BaseException as exc:  # raised into the body at its yield
            error = exc


def twins(
    body: Callable[Concatenate[S, P], Steps[R]],
) -> tuple[Callable[Concatenate[S, P], R], Callable[Concatenate[S, P], Coroutine[Any, Any, R]]]:
    """The ``(blocking, coroutine)`` methods of one body, with its signature and docstring.

    Use in a class body: ``wait_sync, wait = twins(_wait)``.
    """

    @functools.wraps(body)
    def blocking(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return run_blocking(body(self, *args, **kwargs))

    @functools.wraps(body)
    async def coroutine(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await run_async(body(self, *args, **kwargs))

    name = body.__name__.lstrip("_")
    owner = body.__qualname__.rpartition(".")[0]
    for twin, twin_name in ((blocking, f"{name}_sync"), (coroutine, name)):
        twin.__name__ = twin_name
        twin.__qualname__ = f"{owner}.{twin_name}" if owner else twin_name
    blocking.__doc__ = body.__doc__
    coroutine.__doc__ = f"Coroutine twin of :meth:`{name}_sync` (the same body).\n\n" + (
        body.__doc__ or ""
    )
    return blocking, coroutine
