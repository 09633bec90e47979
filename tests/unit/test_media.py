"""Media preparation for the decision providers (engine/_media.py)."""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolroute._core.decide.limits import MediaLimits
from toolroute._core.decide.media import PreparedMedia, image_size, prepare_media, sniff
from toolroute._core.errors import DecisionError, DecisionErrorKind


def png(width: int = 3, height: int = 2) -> bytes:
    ihdr = b"IHDR" + struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + ihdr + struct.pack(">I", zlib.crc32(ihdr))


def jpeg(width: int = 5, height: int = 4, *, fill: bool = False) -> bytes:
    app0 = (
        b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    )
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + (b"\xff" if fill else b"") + sof0 + b"\xff\xd9"


def riff(chunk: bytes, body: bytes) -> bytes:
    payload = b"WEBP" + chunk + struct.pack("<I", len(body)) + body
    return b"RIFF" + struct.pack("<I", len(payload)) + payload


def webp_vp8x(width: int = 640, height: int = 480) -> bytes:
    size = (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return riff(b"VP8X", b"\x00\x00\x00\x00" + size)


def webp_vp8l(width: int = 7, height: int = 9) -> bytes:
    return riff(b"VP8L", b"\x2f" + struct.pack("<I", (width - 1) | (height - 1) << 14))


def webp_vp8(width: int = 11, height: int = 13) -> bytes:
    return riff(b"VP8 ", b"\x00\x00\x00\x9d\x01\x2a" + struct.pack("<HH", width, height))


def gif(width: int = 6, height: int = 8) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00\x00\x00;"


def ftyp(brand: bytes = b"isom") -> bytes:
    return struct.pack(">I", 24) + b"ftyp" + brand + b"\x00\x00\x02\x00" + b"isomiso2"


WEBM = b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01"
LIMITS = MediaLimits(max_images=4, video=True, max_request_bytes=100_000)
NO_VIDEO = MediaLimits(max_images=2, video=False, max_request_bytes=100_000)


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def refused(
    images: Any, video: Any = None, *, limits: MediaLimits | None = LIMITS, accepted: str = ""
) -> str:
    """The message of the refusal ``prepare_media`` must raise (``Any``: wrong shapes too)."""
    with pytest.raises(DecisionError) as caught:
        prepare_media(images, video, limits, vendor="acme", accepted=accepted)
    assert caught.value.kind is DecisionErrorKind.INVALID_REQUEST
    assert caught.value.retryable is False
    return str(caught.value)


# -- sniffing and sizes -------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "mime"),
    [
        (png(), "image/png"),
        (jpeg(), "image/jpeg"),
        (webp_vp8x(), "image/webp"),
        (gif(), "image/gif"),
        (b"GIF87a" + b"\x01\x00\x01\x00", "image/gif"),
        (ftyp(b"isom"), "video/mp4"),
        (ftyp(b"mp42"), "video/mp4"),
        (WEBM, "video/webm"),
        (ftyp(b"avif"), None),
        (ftyp(b"heic"), None),
        (ftyp(b"mif1"), None),
        (b"\x00\x00\x00\x18ftyp", None),
        (b"hello world", None),
        (b"", None),
    ],
)
def test_sniff(data: bytes, mime: str | None) -> None:
    assert sniff(data) == mime


@pytest.mark.parametrize(
    ("data", "size"),
    [
        (png(3, 2), (3, 2)),
        (jpeg(5, 4), (5, 4)),
        (jpeg(1920, 1080, fill=True), (1920, 1080)),
        (webp_vp8x(640, 480), (640, 480)),
        (webp_vp8l(7, 9), (7, 9)),
        (webp_vp8(11, 13), (11, 13)),
        (gif(6, 8), (6, 8)),
        (png()[:20], None),
        (jpeg()[:12], None),
        (b"\xff\xd8\xff\xda\x00\x02", None),
        (gif(0, 8), None),
        (riff(b"VP8 ", b"\x00" * 10), None),
        (ftyp(), None),
        (b"nothing", None),
    ],
)
def test_image_size(data: bytes, size: tuple[int, int] | None) -> None:
    assert image_size(data) == size


# -- accepted inputs ----------------------------------------------------------


def test_nothing_is_nothing_even_without_media_limits() -> None:
    assert prepare_media([], None, None, vendor="acme") == PreparedMedia()


def test_bytes_path_pathlike_and_data_url_are_equivalent(tmp_path: Path) -> None:
    image = png()
    path = tmp_path / "dot.png"
    path.write_bytes(image)
    forms: list[Any] = [image, bytearray(image), str(path), path, data_url("image/png", image)]
    prepared = [prepare_media([form], None, LIMITS, vendor="acme") for form in forms]
    assert all(p == prepared[0] for p in prepared)
    assert prepared[0].images == (data_url("image/png", image),)
    assert prepared[0].image_bytes == (image,)
    assert prepared[0].media_bytes == len(prepared[0].images[0])


def test_images_and_video_in_order_with_total() -> None:
    prepared = prepare_media([png(), jpeg(), webp_vp8x()], ftyp(), LIMITS, vendor="acme")
    assert [url.split(";")[0] for url in prepared.images] == [
        "data:image/png",
        "data:image/jpeg",
        "data:image/webp",
    ]
    assert prepared.video == data_url("video/mp4", ftyp())
    urls = [*prepared.images, prepared.video]
    assert prepared.media_bytes == sum(len(url) for url in urls)


def test_video_alone() -> None:
    prepared = prepare_media([], WEBM, LIMITS, vendor="acme")
    assert prepared.images == ()
    assert prepared.video == data_url("video/webm", WEBM)


def test_jpg_is_normalised_to_jpeg() -> None:
    prepared = prepare_media([data_url("image/jpg", jpeg())], None, LIMITS, vendor="acme")
    assert prepared.images == (data_url("image/jpeg", jpeg()),)


def test_data_url_type_is_read_from_the_bytes() -> None:
    prepared = prepare_media(
        ["DATA:image/jpeg;base64," + data_url("x/y", png()).partition(",")[2]],
        None,
        LIMITS,
        vendor="acme",
    )
    assert prepared.images == (data_url("image/png", png()),)


def test_running_total_allows_the_exact_ceiling() -> None:
    one = len(data_url("image/png", png()))
    limits = MediaLimits(max_images=4, video=False, max_request_bytes=2 * one)
    assert prepare_media([png(), png()], None, limits, vendor="acme").media_bytes == 2 * one
    message = refused([png(), png(), png()], limits=limits)
    assert f"come to {3 * one} bytes" in message
    assert "by image 3" in message
    assert f"at most {2 * one}" in message


# -- refusals ----------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["http", "HTTP"])
def test_plain_http_media_url_is_refused_without_echoing_it(scheme: str) -> None:
    message = refused([f"{scheme}://example.com/cat.png?token=sk-secret-123"])
    assert "remote http:// URL" in message
    assert "not downloaded" in message
    assert "secret" not in message
    assert "example.com" not in message


def test_plain_http_video_url_is_refused() -> None:
    message = refused([], "http://example.com/clip.mp4")
    assert "remote http:// URL" in message


def test_remote_url_is_refused_without_echoing_it() -> None:
    message = refused(["https://example.com/cat.png?token=sk-secret-123"])
    assert "remote https:// URL" in message
    assert "not downloaded" in message
    assert "bytes, a file path or a data: URL" in message
    assert "secret" not in message
    assert "example.com" not in message


@pytest.mark.parametrize("url", ["ftp://host/x.png", "s3://bucket/key?sig=secret", "x_y://secret"])
def test_other_schemes_are_refused(url: str) -> None:
    message = refused([url])
    assert "URL" in message
    assert "secret" not in message
    assert "host" not in message


@pytest.mark.parametrize(
    "url",
    [
        "data:text/plain;base64,aGVsbG8=",
        "data:image/png,rawbytes",
        "data:image/png;base64",
        "data:;base64,aGVsbG8=",
    ],
)
def test_data_urls_that_are_not_base64_media_are_refused(url: str) -> None:
    assert "expected data:image/" in refused([url])


def test_data_url_base64_must_decode_strictly() -> None:
    payload = base64.b64encode(png()).decode()
    assert "does not decode" in refused([f"data:image/png;base64,{payload[:-1]}"])
    assert "does not decode" in refused([f"data:image/png;base64,{payload[:8]}\n{payload[8:]}"])
    assert "does not decode" in refused(["data:image/png;base64,é"])


def test_data_url_must_hold_media() -> None:
    assert "no known format" in refused([data_url("image/png", b"not an image")])
    assert "empty" in refused([data_url("image/png", b"")])


def test_empty_bytes_and_empty_string_are_refused() -> None:
    assert "Image 1 is empty (0 bytes)" in refused([b""])
    assert "Image 1 is an empty string" in refused([""])


def test_missing_path_and_directory_are_refused(tmp_path: Path) -> None:
    missing = tmp_path / "nope.png"
    assert f"no file at {str(missing)!r}" in refused([str(missing)])
    assert "is not a file" in refused([tmp_path])


def test_oversized_file_is_refused_by_stat_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.png"
    path.write_bytes(png() + b"\x00" * 2000)
    limits = MediaLimits(max_images=1, video=False, max_request_bytes=1000)

    def never(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the file was opened")

    monkeypatch.setattr(Path, "open", never)
    message = refused([path], limits=limits)
    assert f"is {path.stat().st_size} bytes" in message
    assert "at most 1000 bytes" in message


def test_long_path_is_never_echoed() -> None:
    long_path = "/tmp/" + "x" * 295
    assert len(long_path) == 300
    message = refused([long_path])
    assert "(a 300-character string)" in message
    assert "xxxxxxxxxx" not in message


def test_unknown_bytes_are_refused() -> None:
    message = refused([b"just some text"])
    assert "14 bytes of no known format" in message
    assert "PNG, JPEG, WebP or GIF" in message


def test_video_in_an_image_slot_and_image_as_video_are_refused() -> None:
    assert "Image 2 is a video (video/mp4)" in refused([png(), ftyp()])
    assert "The video is an image (image/png)" in refused([], png())


def test_image_type_outside_the_accepted_ones_is_refused() -> None:
    limits = MediaLimits(
        max_images=2,
        video=False,
        max_request_bytes=10_000,
        image_types=frozenset({"image/png", "image/jpeg", "image/webp"}),
    )
    message = refused([gif()], limits=limits)
    assert "image/jpeg, image/png, image/webp" in message
    assert "image 1 is image/gif" in message


def test_too_many_images_are_refused_before_reading(tmp_path: Path) -> None:
    message = refused([png(), png(), str(tmp_path / "missing.png")], limits=NO_VIDEO)
    assert "at most 2 images" in message
    assert "has 3" in message


def test_video_to_a_provider_without_video() -> None:
    message = refused([png()], WEBM, limits=NO_VIDEO, accepted="clef, openai")
    assert message == "acme does not accept video. Use a decision provider that does: clef, openai"


def test_any_media_to_a_provider_without_media_limits() -> None:
    message = refused([png()], limits=None, accepted="perplexity-decider, cloudflare-clef")
    assert message == (
        "acme does not accept images or video. Use a decision provider that does:"
        " perplexity-decider, cloudflare-clef"
    )
    assert refused([], WEBM, limits=None) == "acme does not accept images or video."


def test_wrong_shapes_are_refused() -> None:
    assert "list of media" in refused(png())
    assert "Image 1 is of type int" in refused([42])


# -- properties ---------------------------------------------------------------

MAGIC = [b"", b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF89a", b"\x1a\x45\xdf\xa3"]


def attempt(images: list[Any], video: Any = None) -> PreparedMedia | DecisionError:
    """What ``prepare_media`` returns, or the ``DecisionError`` it raises (nothing else)."""
    try:
        return prepare_media(images, video, LIMITS, vendor="acme")
    except DecisionError as error:
        return error


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(MAGIC), st.binary(max_size=200), st.booleans())
def test_bytes_either_round_trip_or_are_refused(magic: bytes, tail: bytes, as_video: bool) -> None:
    data = magic + tail
    outcome = attempt([], data) if as_video else attempt([data])
    if isinstance(outcome, DecisionError):
        assert outcome.kind is DecisionErrorKind.INVALID_REQUEST
        return
    url = outcome.video if as_video else outcome.images[0]
    assert url is not None
    header, _, payload = url.partition(",")
    assert header == f"data:{sniff(data)};base64"
    assert base64.b64decode(payload, validate=True) == data
    assert outcome.media_bytes == len(url)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_string_is_prepared_or_refused(text: str) -> None:
    outcome = attempt([text])
    if isinstance(outcome, DecisionError):
        assert outcome.kind is DecisionErrorKind.INVALID_REQUEST
        if len(text) > 200:
            assert text not in str(outcome)
