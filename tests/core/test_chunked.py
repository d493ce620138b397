"""The request body framing the port proxy forwards by (provider_sdk._chunked): chunked
bodies decoded as they stream, whatever their split, and malformed ones refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from provider_sdk._chunked import (
    MAX_LINE,
    MAX_TRAILERS,
    ChunkedDecoder,
    ChunkedError,
    RequestBody,
)

_EXTENSIONS = st.sampled_from([b"", b";a", b";a=1", b" ; name = \"q\\\"uoted\"", b";x;y=z"])
_TRAILERS = st.lists(st.sampled_from([b"X-Sum: 1", b"Expires:", b"A:\tb c"]), max_size=3)


def _decode(pieces: list[bytes]) -> tuple[bytes, bytes, bool]:
    """The body decoded from ``pieces`` fed one at a time, what came past its end, and
    whether it ended."""
    decoder = ChunkedDecoder()
    body, rest = b"", b""
    for piece in pieces:
        if decoder.done:
            rest += piece
            continue
        data, past = decoder.feed(piece)
        body += data
        rest += past
    return body, rest, decoder.done


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@st.composite
def _chunked(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """A body and a chunked encoding of it (random chunks, extensions, size case,
    leading zeros, trailers)."""
    body = draw(st.binary(max_size=2000))
    sizes = draw(st.lists(st.integers(1, 300), max_size=20))
    encoded, at = b"", 0
    for size in [*sizes, len(body)]:
        chunk = body[at:at + size]
        if not chunk:
            continue
        at += len(chunk)
        digits = draw(st.sampled_from(["%x", "%X", "00%x"])) % len(chunk)
        encoded += digits.encode() + draw(_EXTENSIONS) + b"\r\n" + chunk + b"\r\n"
    trailers = b"".join(t + b"\r\n" for t in draw(_TRAILERS))
    return body, encoded + b"0" + draw(_EXTENSIONS) + b"\r\n" + trailers + b"\r\n"


@given(_chunked(), st.binary(max_size=200), st.lists(st.integers(0, 5000), max_size=30))
def test_any_split_of_a_chunked_body_decodes_to_the_body(
        case: tuple[bytes, bytes], after: bytes, cuts: list[int]) -> None:
    """Fed in any pieces, a chunked body decodes to its bytes, ends where it ends, and
    what follows (a pipelined request) is handed back, not decoded."""
    body, encoded = case
    decoded, rest, done = _decode(_split(encoded + after, cuts))
    assert done
    assert decoded == body
    assert rest == after


@given(_chunked(), st.lists(st.integers(0, 5000), max_size=30))
def test_the_reframed_body_is_the_same_body(case: tuple[bytes, bytes],
                                            cuts: list[int]) -> None:
    """What :class:`RequestBody` forwards is itself a well-formed chunked body of the
    same bytes, ending in the last chunk, with nothing of what follows."""
    body, encoded = case
    framing = RequestBody(chunked=True)
    after = b"GET /next HTTP/1.1\r\n\r\n"
    taken = [framing.take(piece) for piece in _split(encoded + after, cuts)]
    forwarded = b"".join(forward for forward, _ in taken)
    assert framing.done
    assert b"".join(past for _, past in taken) == after
    assert forwarded.endswith(b"0\r\n\r\n")
    decoded, rest, done = _decode([forwarded])
    assert (decoded, rest, done) == (body, b"", True)


_FRAGMENTS = st.lists(st.sampled_from([
    b"0", b"5", b"a", b"F", b"\r\n", b"\r", b"\n", b";", b"=", b'"', b"\\", b" ", b"\t",
    b"x", b"hello", b":", b"X-A", b"\x00", b"\xff", b"-"]), max_size=200).map(b"".join)


@given(st.one_of(st.binary(max_size=3000), _FRAGMENTS),
       st.lists(st.integers(0, 5000), max_size=10))
def test_garbage_is_a_clean_error_or_a_body(data: bytes, cuts: list[int]) -> None:
    """Whatever comes, the decoder returns body bytes or raises :class:`ChunkedError`
    saying how in its own words, never another exception, and never returns more than
    it was given."""
    decoder = ChunkedDecoder()
    given_bytes = returned = 0
    error = ""
    try:
        for piece in _split(data, cuts):
            body, rest = decoder.feed(piece)
            given_bytes += len(piece)
            returned += len(body) + len(rest)
            assert returned <= given_bytes
    except ChunkedError as exc:
        error = str(exc)
    assert not error or error.startswith(("a ", "trailers longer than")), error


@given(st.sampled_from([b"\n", b"\r", b"x", b" ", b"-", b";", b"\x00", b"\xff"]),
       st.integers(0, 3))
def test_a_corrupted_framing_byte_is_refused(byte: bytes, where: int) -> None:
    """A stray byte in a size line, after a chunk's data, in the last chunk's line or
    in the trailer section is an error, not a different reading of the body."""
    encoded = [b"5", b"\r\nhello", b"\r\n0", b"\r\n", b"\r\n"]
    encoded[where] += byte
    with pytest.raises(ChunkedError):
        _decode([b"".join(encoded)])


@pytest.mark.parametrize("data", [
    b"g\r\n", b"\r\n", b"-1\r\n", b"0x5\r\nhello\r\n", b"5 \r\nhello\r\n", b" 5\r\n",
    b"5\nhello\r\n", b"5\r\nhello\n0\r\n\r\n", b"5\r\nhelloX\r\n", b"5;\r\n",
    b"5;a=\r\n", b"5;a=\"open\r\n", b"5;a b\r\n", b"0\r\nNo-Colon\r\n", b"0\r\n Folded: a\r\n",
    b"0\r\nA: b\x00c\r\n", b"0\r\n\n", b"5\r\r\n",
    b"1" * 17 + b"\r\n",
], ids=lambda d: repr(d[:20]))
def test_malformed_framing_is_refused(data: bytes) -> None:
    with pytest.raises(ChunkedError):
        _decode([data])


def test_lines_and_trailers_are_bounded() -> None:
    """A size line, trailer line or trailer section past its bound is refused as it
    comes, without waiting for a line end (memory stays bounded)."""
    with pytest.raises(ChunkedError, match="longer than"):
        ChunkedDecoder().feed(b"1;a=" + b"b" * MAX_LINE)
    ChunkedDecoder().feed(b"1;a=" + b"b" * (MAX_LINE - 4) + b"\r")  # just within
    with pytest.raises(ChunkedError, match="longer than"):
        ChunkedDecoder().feed(b"0\r\nX: " + b"a" * MAX_LINE)
    decoder = ChunkedDecoder()
    decoder.feed(b"0\r\n")
    line = b"X: " + b"a" * 1000 + b"\r\n"
    decoder.feed(line * (MAX_TRAILERS // len(line)))
    with pytest.raises(ChunkedError, match="trailers longer"):
        decoder.feed(line)


def test_a_huge_chunk_streams() -> None:
    """A chunk's bytes pass as they come: 64 MiB announced, fed in 64 KiB pieces, each
    returned at once; nothing is held."""
    decoder = ChunkedDecoder()
    assert decoder.feed(b"4000000\r\n") == (b"", b"")
    piece = b"a" * (1 << 16)
    for _ in range(1 << 10):
        assert decoder.feed(piece) == (piece, b"")
    assert decoder.feed(b"\r\n0\r\n\r\nnext") == (b"", b"next")
    assert decoder.done


def test_a_length_body_forwards_its_length_only() -> None:
    framing = RequestBody(4)
    assert framing.take(b"bo") == (b"bo", b"")
    assert not framing.done
    assert framing.take(b"dyGET / HTTP/1.1\r\n") == (b"dy", b"GET / HTTP/1.1\r\n")
    assert framing.done
    assert framing.take(b"more") == (b"", b"more")
    assert RequestBody().done


def test_the_reframed_chunks_drop_extensions_and_trailers() -> None:
    framing = RequestBody(chunked=True)
    got = framing.take(b"3;ext=\"x\"\r\nabc\r\n0\r\nX-Token: secret\r\n\r\nGET /")
    assert got == (b"3\r\nabc\r\n0\r\n\r\n", b"GET /")
    assert framing.take(b"next") == (b"", b"next")
