"""Wire protocols: request bodies ⇄ the internal DecisionRequest / Decision, with no I/O.

`openai` (OpenAI Decisions), `systemone` (TypeSafe System One), `common` (body decoding,
strict JSON, multipart, compact JSON text), `images` (data URLs, base64, format sniffing).
"""
