"""Images and video for the decision providers, checked locally and sent as ``data:`` URLs.

NeuroLink's ``utils/decisionMedia.ts``: media come as bytes, a local file path or a base64
``data:`` URL, and leave as ``data:<mime>;base64,…`` URLs. Remote URLs are refused (nothing is
downloaded on the caller's behalf). Every refusal is a non-retryable ``invalid_request``.
"""

from __future__ import annotations

import base64
import os
import re
import struct
from collections.abc import Callable, Sequence

import attrs

from .. import files
from ..errors import DecisionError, DecisionErrorKind
from .limits import MediaLimits
from .types import Media

__all__ = ["MAX_ECHO_CHARS", "PreparedMedia", "image_size", "prepare_media", "sniff"]

#: Strings longer than this are described by their length, never echoed.
MAX_ECHO_CHARS = 200
#: ``ftyp`` brands of still images and image sequences (AVIF, HEIC): not video.
_STILL_BRANDS = frozenset({b"avif", b"avis", b"heic", b"heix", b"hevc", b"hevx", b"mif1", b"msf1"})
#: JPEG start-of-frame markers (``C4``, ``C8`` and ``CC`` are not frames).
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]{0,31}")
_EXPECTED = "bytes, a file path or a data: URL"
_DATA_URL = "data:image/…;base64,… or data:video/…;base64,…"
_MEDIA_TYPE = re.compile(r"(image|video)/[a-z0-9.+-]+")
_KNOWN = "a PNG, JPEG, WebP or GIF image or an MP4 or WebM video"


@attrs.frozen
class PreparedMedia:
    """Media ready for the wire.

    Attributes:
        images: one ``data:`` URL per image, in order.
        image_bytes: the decoded bytes of each image (vendors measure them).
        video: the video's ``data:`` URL, if any.
        media_bytes: the sum of the data-URL lengths.
    """

    images: tuple[str, ...] = attrs.field(default=(), repr=False)
    image_bytes: tuple[bytes, ...] = attrs.field(default=(), repr=False)
    video: str | None = attrs.field(default=None, repr=False)
    media_bytes: int = 0


def sniff(data: bytes) -> str | None:
    """The MIME type of ``data`` by its magic bytes, or ``None`` if it is no known image or video."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[4:8] == b"ftyp" and len(data) >= 12 and data[8:12] not in _STILL_BRANDS:
        return "video/mp4"
    if data.startswith(b"\x1a\x45\xdf\xa3"):
        return "video/webm"
    return None


def _png_size(data: bytes) -> tuple[int, int] | None:
    if data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack_from(">II", data, 16)
    return width, height


def _gif_size(data: bytes) -> tuple[int, int] | None:
    width, height = struct.unpack_from("<HH", data, 6)
    return width, height


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack_from("<HH", data, 26)
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and data[20:21] == b"\x2f":
        (bits,) = struct.unpack_from("<I", data, 21)
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
        elif marker == 0x01 or 0xD0 <= marker <= 0xD8:  # standalone markers
            at += 2
        elif marker in (0xD9, 0xDA):  # end of image, start of scan: no frame header came
            return None
        elif marker in _SOF:
            height, width = struct.unpack_from(">HH", data, at + 5)
            return width, height
        else:
            (length,) = struct.unpack_from(">H", data, at + 2)
            if length < 2:
                return None
            at += 2 + length
    return None


_SIZE_READERS: dict[str, Callable[[bytes], tuple[int, int] | None]] = {
    "image/png": _png_size,
    "image/jpeg": _jpeg_size,
    "image/webp": _webp_size,
    "image/gif": _gif_size,
}


def image_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from the image's header, or ``None`` if unreadable (or zero)."""
    reader = _SIZE_READERS.get(sniff(data) or "")
    try:
        size = reader(data) if reader else None
    except struct.error:
        return None
    return size if size and min(size) > 0 else None


def _quote(text: str) -> str:
    """``text`` quoted, or only its length when it is too long to echo."""
    return repr(text) if len(text) <= MAX_ECHO_CHARS else f"(a {len(text)}-character string)"


def _refuse(message: str) -> DecisionError:
    return DecisionError(DecisionErrorKind.INVALID_REQUEST, message)


def _remote(text: str, label: str) -> DecisionError:
    """The refusal of a ``scheme://`` string; only a short, valid scheme is echoed."""
    scheme = text.partition("://")[0].strip().lower()
    if scheme in ("http", "https"):
        return _refuse(
            f"{label} is a remote {scheme}:// URL; media is not downloaded on the caller's"
            f" behalf. Pass {_EXPECTED} instead."
        )
    shown = f"a {scheme}:// URL" if _SCHEME.fullmatch(scheme) else "a URL"
    return _refuse(f"{label} is {shown}; expected {_EXPECTED}.")


def _sniffed(data: bytes, label: str) -> str:
    """The MIME type of ``data``; refuse it empty or unknown."""
    if not data:
        raise _refuse(f"{label} is empty (0 bytes); expected {_KNOWN}.")
    mime = sniff(data)
    if mime is None:
        raise _refuse(f"{label} is {len(data)} bytes of no known format; expected {_KNOWN}.")
    return mime


def _lower(label: str) -> str:
    return label[:1].lower() + label[1:]


def _url_length(mime: str, size: int) -> int:
    return len(f"data:{mime};base64,") + 4 * ((size + 2) // 3)


@attrs.frozen
class _Rules:
    """One provider's media limits, applied item by item."""

    vendor: str
    limits: MediaLimits

    def load(self, item: object, label: str) -> tuple[str, bytes]:
        """The sniffed MIME type and the bytes of one item."""
        if isinstance(item, bytes | bytearray | memoryview):
            data = bytes(item)
            return _sniffed(data, label), data
        if isinstance(item, str):
            if not item:
                raise _refuse(f"{label} is an empty string; expected {_EXPECTED}.")
            if item[:5].lower() == "data:":
                return self.from_data_url(item, label)
            if "://" in item:
                raise _remote(item, label)
            return self.from_path(item, label)
        if isinstance(item, os.PathLike):
            return self.from_path(os.fsdecode(item), label)
        raise _refuse(f"{label} is of type {type(item).__name__}; expected {_EXPECTED}.")

    def from_data_url(self, text: str, label: str) -> tuple[str, bytes]:
        header, comma, payload = text.partition(",")
        params = header[5:].split(";")
        mime = params[0].strip().lower()
        if not (comma and params[-1].strip().lower() == "base64" and _MEDIA_TYPE.fullmatch(mime)):
            raise _refuse(f"{label} is a data: URL of type {_quote(mime)}; expected {_DATA_URL}.")
        try:
            data = base64.b64decode(payload, validate=True)
        except ValueError:
            raise _refuse(f"{label} is a data: URL whose base64 does not decode.") from None
        return _sniffed(data, label), data

    def from_path(self, text: str, label: str) -> tuple[str, bytes]:
        shown, cap = _quote(text), self.limits.max_request_bytes
        too_big = f"{self.vendor} accepts at most {cap} bytes per request"
        try:
            data = files.read_regular_file(text, cap)
        except FileNotFoundError:
            raise _refuse(f"{label}: no file at {shown}; expected {_EXPECTED}.") from None
        except files.NotAFile:
            raise _refuse(f"{label}: {shown} is not a file; expected {_EXPECTED}.") from None
        except files.FileTooLarge as error:
            if error.size is None:
                raise _refuse(f"{label}: {shown} is over {cap} bytes; {too_big}.") from None
            raise _refuse(f"{label}: {shown} is {error.size} bytes; {too_big}.") from None
        except (OSError, ValueError) as error:
            raise _refuse(f"{label}: {shown} cannot be read ({type(error).__name__}).") from None
        return _sniffed(data, label), data

    def check_kind(self, mime: str, want: str, label: str) -> None:
        """Refuse a video in an image slot, an image as the video, or an image type not read."""
        if want == "image" and mime.startswith("video/"):
            raise _refuse(f"{label} is a video ({mime}), not an image; pass it as the video.")
        if want == "video" and mime.startswith("image/"):
            raise _refuse(f"{label} is an image ({mime}), not a video; pass it among the images.")
        if want == "image" and mime not in self.limits.image_types:
            types = ", ".join(sorted(self.limits.image_types))
            raise _refuse(f"{self.vendor} reads {types} images; {_lower(label)} is {mime}.")

    def encode(self, item: object, want: str, label: str, total: int) -> tuple[str, bytes, int]:
        """One item's data URL, its bytes and the running total of data-URL lengths."""
        mime, data = self.load(item, label)
        self.check_kind(mime, want, label)
        total += _url_length(mime, len(data))
        if total > self.limits.max_request_bytes:
            raise _refuse(
                f"The media come to {total} bytes as data URLs by {_lower(label)}; {self.vendor}"
                f" accepts at most {self.limits.max_request_bytes}. Send fewer or smaller media."
            )
        return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}", data, total


def _admit(
    count: int, video: bool, limits: MediaLimits | None, vendor: str, accepted: str
) -> MediaLimits:
    """Refuse media the provider never reads, before any item is touched."""
    elsewhere = f"Use a decision provider that does: {accepted}" if accepted else ""
    if limits is None:
        raise _refuse(f"{vendor} does not accept images or video. {elsewhere}".strip())
    if count > limits.max_images:
        raise _refuse(f"{vendor} accepts at most {limits.max_images} images; this one has {count}.")
    if video and not limits.video:
        raise _refuse(f"{vendor} does not accept video. {elsewhere}".strip())
    return limits


def prepare_media(
    images: Sequence[Media],
    video: Media | None,
    limits: MediaLimits | None,
    *,
    vendor: str,
    accepted: str = "",
) -> PreparedMedia:
    """Check the images and video against ``limits`` and turn each into a ``data:`` URL.

    Args:
        images: bytes, local paths or ``data:`` URLs, in order.
        video: one video, likewise.
        limits: the provider's media limits; ``None`` when it reads no media.
        vendor: the provider's name, for messages.
        accepted: a comma list of decision providers that read media, for messages.

    Raises:
        DecisionError: ``invalid_request`` (never retryable) for anything refused.
    """
    if isinstance(images, str | bytes | bytearray | os.PathLike):
        raise _refuse(f"images must be a list of media, not of type {type(images).__name__}.")
    items = tuple(images)
    if not items and video is None:
        return PreparedMedia()
    rules = _Rules(vendor, _admit(len(items), video is not None, limits, vendor, accepted))
    urls: list[str] = []
    raws: list[bytes] = []
    total = 0
    for index, item in enumerate(items, 1):
        url, data, total = rules.encode(item, "image", f"Image {index}", total)
        urls.append(url)
        raws.append(data)
    video_url = None
    if video is not None:
        video_url, _, total = rules.encode(video, "video", "The video", total)
    return PreparedMedia(tuple(urls), tuple(raws), video_url, total)
