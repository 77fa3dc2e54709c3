"""One method table for the threaded and the asyncio twin of a client class (pure).

A call is written once, as a builder: a function of the twin and the call's arguments that
returns what to send, as data (a `group_rpcs.GroupRpc`, or a `client_calls` flow: a
generator that yields the steps to perform and returns the result). `TwinCall(builder)`
makes it a method of both twins, with the builder's signature: the twin's `run` performs
what the builder made, blocking on the threaded twin (`blocking = True`: the method returns
the result) and awaited on the asyncio twin (`blocking = False`: it returns a coroutine of
the result). So the twins keep only their I/O and cannot drift apart.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Concatenate, Generic, Literal, ParamSpec, Protocol, Self, TypeVar, overload

P = ParamSpec("P")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Built(Protocol[T_co]):
    """What a builder returns: something whose result is a `T` (`GroupRpc[T]`)."""

    def read(self, reply: Any, /) -> T_co: ...


class Blocking(Protocol):
    """The threaded twin: its `run` blocks until the result."""

    @property
    def blocking(self) -> Literal[True]: ...


class Awaited(Protocol):
    """The asyncio twin: its `run` returns a coroutine of the result."""

    @property
    def blocking(self) -> Literal[False]: ...


class TwinCall(Generic[P, T]):
    """`build` as a method of both twins (see the module doc)."""

    def __init__(
        self, build: Callable[Concatenate[Any, P], Built[T] | Generator[Any, Any, T]]
    ) -> None:
        self.build = build
        self.__doc__ = build.__doc__
        signature = inspect.signature(build)  # the method's: the builder's, but its twin
        self.signature = signature.replace(
            parameters=list(signature.parameters.values())[1:],
            return_annotation=inspect.Signature.empty,  # the builder's: what to send
        )

    @overload
    def __get__(self, obj: None, owner: type) -> Self: ...

    @overload
    def __get__(self, obj: Blocking, owner: type) -> Callable[P, T]: ...

    @overload
    def __get__(self, obj: Awaited, owner: type) -> Callable[P, Coroutine[Any, Any, T]]: ...

    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self
        build = self.build

        @functools.wraps(build)
        def call(*args: P.args, **kwargs: P.kwargs) -> Any:
            return obj.run(build(obj, *args, **kwargs))

        call.__signature__ = self.signature  # type: ignore[attr-defined]
        return call
