"""Wire protocols: request bodies ⇄ the internal DecisionRequest / Decision, with no I/O.

`openai` (OpenAI Decisions), `systemone` (TypeSafe System One), `common` (body decoding,
strict JSON, multipart, compact JSON text), `images` (data URLs, base64, format sniffing),
`protocol` (the record each protocol fills, which the server loops over).
"""

from . import openai, systemone
from .protocol import PROTOCOLS

PROTOCOLS += [openai.PROTOCOL, systemone.PROTOCOL]
