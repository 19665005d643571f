"""Wire protocols: request bodies ⇄ the internal DecisionRequest / Decision, with no I/O.

`openai` (OpenAI Decisions), `systemone` (TypeSafe System One), `common` (body decoding,
strict JSON, multipart, compact JSON text), `images` (data URLs, base64, format sniffing),
`protocol` (the record each protocol fills), `schema` (JSON Schema building blocks).

PROTOCOLS is every protocol the server speaks: the app, its error handler and the OpenAPI
document loop over it, so a new protocol is one new module listed here.
"""

from . import openai, systemone
from .protocol import Protocol

PROTOCOLS: list[Protocol] = [openai.PROTOCOL, systemone.PROTOCOL]
