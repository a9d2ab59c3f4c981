# SPDX-License-Identifier: Apache-2.0
"""deras_client - Python client for deras-router (ZeroMQ + msgpack; see README.md).

    from deras_client import Client
    with Client("tcp://127.0.0.1:5555") as c:
        print(c.complete("Hello", max_tokens=32, temperature=0).text)
        for ev in c.stream("Hello", max_tokens=32):
            print(ev.text if hasattr(ev, "text") else "", end="")

    async with AsyncClient("tcp://127.0.0.1:5555") as c:     # asyncio: the same calls
        print((await c.complete("Hello", max_tokens=32)).text)
"""

from .aio import AsyncClient, AsyncStream
from .client import DEFAULT_ADDRESS, PARAMS, Client, Stream
from .types import (ERROR_CODES, PROTOCOL_VERSION, Choice, Chunk, Completion, DerasError,
                    DerasTimeout, DerasUnavailable, Final, Usage)

__all__ = ["Client", "Stream", "AsyncClient", "AsyncStream", "Completion", "Choice", "Chunk",
           "Final", "Usage", "DerasError", "DerasTimeout", "DerasUnavailable", "ERROR_CODES",
           "PARAMS", "PROTOCOL_VERSION", "DEFAULT_ADDRESS"]
__version__ = "0.1.0"
