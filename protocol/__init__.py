"""RAWP protocol core: frames, codec, errors, the session state machine, finalization, buffers.

Sans-I/O: nothing here touches a socket except :mod:`protocol.client` (asyncio). The master
(``relay``), the client library and the conformance runner all stand on this package.
"""

__all__: list[str] = []
