"""Image bytes from the wire: data URLs, base64, optional remote fetch, and format sniffing.

Only PNG, JPEG, WEBP and GIF are accepted; the real format always comes from the bytes,
whatever the URL or the client declared.
"""

from __future__ import annotations

import base64
import binascii
import re
import urllib.error
import urllib.request

from ..request import Image

REMOTE_TIMEOUT_S = 10.0
REMOTE_MAX_BYTES = 20 * 1024 * 1024

_DATA_URL = re.compile(r"data:image/(png|jpeg|jpg|webp|gif)((?:;[^;,]*)*?);base64,(.*)", re.IGNORECASE | re.DOTALL)
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


class ImageError(ValueError):
    """`code` is `invalid_image` (bad bytes) or `invalid_image_url` (a URL we will not or cannot read)."""

    def __init__(self, message: str, code: str = "invalid_image") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def sniff(data: bytes) -> str | None:
    """The media type the bytes really are, or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_from_bytes(data: bytes) -> Image:
    media_type = sniff(data)
    if media_type is None:
        raise ImageError("the image is not a PNG, JPEG, WEBP or GIF file")
    return Image(data, media_type)


def decode_base64(text: str) -> bytes:
    """Standard base64 (padding optional, ASCII whitespace ignored); empty or invalid raises ImageError."""
    compact = "".join(text.split())
    if not compact or not _BASE64.fullmatch(compact):
        raise ImageError("the image data is not valid base64")
    compact = compact.rstrip("=")
    if len(compact) % 4 == 1:
        raise ImageError("the image data is not valid base64 (truncated)")
    try:
        return base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("the image data is not valid base64") from None


def image_from_url(url: str, fetch=None) -> Image:
    """A data URL, or an http(s) URL read with `fetch` when remote images are enabled."""
    if url[:5].lower() == "data:":
        if (m := _DATA_URL.fullmatch(url)) is None:
            raise ImageError("a data URL must look like data:image/(png|jpeg|webp|gif);base64,<data>")
        return image_from_bytes(decode_base64(m.group(3)))
    if not url.lower().startswith(("http://", "https://")):
        raise ImageError(
            "image_url must be a base64 data URL or an http(s) URL (file ids are not supported)", "invalid_image_url"
        )
    if fetch is None:
        raise ImageError(
            "remote image URLs are disabled on this server; send the image as a base64 data URL", "invalid_image_url"
        )
    return image_from_bytes(fetch(url))


def fetch_remote(url: str, timeout: float = REMOTE_TIMEOUT_S, cap: int = REMOTE_MAX_BYTES) -> bytes:
    """GET an http(s) image with a timeout and a size cap (only used when the server enables it)."""
    if not url.lower().startswith(("http://", "https://")):
        raise ImageError("only http(s) image URLs can be fetched", "invalid_image_url")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (scheme checked above)
            data = response.read(cap + 1)
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise ImageError(f"the image URL could not be read: {e}", "invalid_image_url") from None
    if len(data) > cap:
        raise ImageError(f"the image at the URL is larger than {cap} bytes", "invalid_image_url")
    return data
