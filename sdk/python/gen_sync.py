"""Generate the sync client (dsec/client.py) from the async one (dsec/aio.py).

    python3 gen_sync.py           # rewrite dsec/client.py
    python3 gen_sync.py --check   # exit 1 if dsec/client.py is not what aio.py gives

aio.py is the one source of both clients. In its code (not its strings and
comments) ``async def``/``async for``/``async with`` lose ``async``, ``await``
goes, the async dunders and ``aclose`` become their sync names; everywhere the
Async class names and the I/O shell module (_async_http -> _sync_http, which has
the same names over http.client and threads) are swapped. The module docstring is
replaced. Standard library only (tokenize), so the tests can run it.
"""

from __future__ import annotations

import io
import os
import re
import sys
import tokenize
from typing import List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "dsec", "aio.py")
TARGET = os.path.join(HERE, "dsec", "client.py")

SYNC_DOC = '''"""The synchronous client: :class:`Client`, :class:`Sandbox`, :class:`Files`,
:class:`Process`, :class:`ExecStream`, :class:`Trajectory`.

GENERATED from aio.py by gen_sync.py: do not edit; edit aio.py and run
``python3 gen_sync.py`` in sdk/python (a test checks this file is up to date)."""'''

# Swapped in code, strings and comments alike.
NAMES = {
    "AsyncClient": "Client",
    "AsyncSandbox": "Sandbox",
    "AsyncFiles": "Files",
    "AsyncProcess": "Process",
    "AsyncExecStream": "ExecStream",
    "AsyncTrajectory": "Trajectory",
    "_async_http": "_sync_http",
}

# Swapped in code only.
CODE_NAMES = {
    **NAMES,
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
    "aclose": "close",
    "AsyncIterator": "Iterator",
    "AsyncIterable": "Iterable",
    "StopAsyncIteration": "StopIteration",
}

_NAMES_RE = re.compile(r"\b(" + "|".join(map(re.escape, NAMES)) + r")\b")
_CODE_NAMES_RE = re.compile(r"\b(" + "|".join(map(re.escape, CODE_NAMES)) + r")\b")
_ASYNC_RE = re.compile(r"\basync (def|for|with)\b")
_AWAIT_RE = re.compile(r"\bawait ")


def _segments(src: str) -> List[Tuple[bool, str]]:
    """src split into (is_text, piece): strings and comments are text, the rest code."""
    lines = src.splitlines(keepends=True)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))

    def off(pos: Tuple[int, int]) -> int:
        return starts[pos[0] - 1] + pos[1]

    out: List[Tuple[bool, str]] = []
    at = 0
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type in (tokenize.STRING, tokenize.COMMENT):
            a, b = off(tok.start), off(tok.end)
            out.append((False, src[at:a]))
            out.append((True, src[a:b]))
            at = b
    out.append((False, src[at:]))
    return out


def generate(src: str) -> str:
    """The sync client's source for the async client's source."""
    segs = _segments(src)
    # The first string is the module docstring.
    for i, (is_text, piece) in enumerate(segs):
        if is_text and piece.startswith('"""'):
            segs[i] = (True, SYNC_DOC)
            break
    out = []
    for is_text, piece in segs:
        if is_text:
            out.append(_NAMES_RE.sub(lambda m: NAMES[m.group(1)], piece))
        else:
            piece = _ASYNC_RE.sub(r"\1", piece)
            piece = _AWAIT_RE.sub("", piece)
            out.append(_CODE_NAMES_RE.sub(lambda m: CODE_NAMES[m.group(1)], piece))
    text = "".join(out)
    if re.search(r"\b(async|await|asyncio)\b", "".join(p for t, p in _segments(text) if not t)):
        raise SystemExit("gen_sync: async code left in the sync client")
    return text


def main(argv: List[str]) -> int:
    with open(SOURCE, encoding="utf-8") as f:
        want = generate(f.read())
    if "--check" in argv:
        try:
            with open(TARGET, encoding="utf-8") as f:
                have = f.read()
        except FileNotFoundError:
            have = ""
        if have != want:
            print(f"{TARGET} is stale: run python3 gen_sync.py in {HERE}", file=sys.stderr)
            return 1
        return 0
    with open(TARGET, "w", encoding="utf-8") as f:
        f.write(want)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
