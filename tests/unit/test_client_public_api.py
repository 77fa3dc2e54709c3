"""The client's public surface: every public class says what it is, and `dir(replog)`
shows the lazily imported `Client` (issue 29: "Client has no docstring and dir(replog)
does not show it")."""

from __future__ import annotations

import inspect

import pytest

import replog
import replog.client


def test_every_public_class_of_the_client_has_its_own_docstring() -> None:
    missing = []
    for name in replog.client.__all__:
        obj = getattr(replog.client, name)
        doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
        # a dataclass without one gets its signature as __doc__: that is not a docstring
        if not doc or doc.startswith(f"{name}("):
            missing.append(name)
    assert missing == []


def test_dir_of_replog_shows_the_lazily_imported_client() -> None:
    assert {"Client", "Record", "__version__"} <= set(dir(replog))
    assert replog.Client is replog.client.Client


def test_a_misspelt_producer_option_is_a_type_error_sync_and_asyncio() -> None:
    from replog.client.aio import AsyncClient
    from replog.client.factories import Factories

    with pytest.raises(TypeError, match="linger"):
        Factories.producer(object(), "t", linger=5)  # type: ignore[arg-type,call-arg]
    with pytest.raises(TypeError, match="linger"):
        AsyncClient.producer(object(), "t", linger=5)  # type: ignore[arg-type,call-arg]
