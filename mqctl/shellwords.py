"""CMD strings (``consume --exec``, ``tx send --exec``, ``tx check --check-cmd``) split into
words as a POSIX shell splits a command line, then run without a shell.

Python's ``shlex`` (POSIX mode) differs from ``sh`` inside double quotes: it keeps a
backslash before ``$`` and a backquote (``"\\$0"`` stays ``\\$0``; ``sh`` gives ``$0``), so
``sh -c "echo \\$0 x"`` would print ``$0 x`` where a shell prints ``sh x``. Here, as in
POSIX (XCU 2.2): outside quotes a backslash keeps the next character literally (a backslash
and a newline go altogether); inside single quotes nothing is special; inside double quotes
a backslash is removed before ``$``, a backquote, ``"``, ``\\`` and a newline (the newline
goes too), and kept before anything else. Nothing is expanded: no variables, no globs, no
operators (``|``, ``;``, ``#`` are plain characters, as ``shlex.split`` left them).
"""
from __future__ import annotations

BLANKS = " \t\n"   # (a carriage return is part of a word in sh; shlex took it for a blank)
DQUOTE_ESCAPES = '$`"\\\n'


def split(line: str) -> list[str]:
    """The words of ``line``. ValueError for a quote left open ("No closing quotation",
    shlex's wording)."""
    words: list[str] = []
    word: list[str] = []
    in_word = False   # (a pair of empty quotes is a word: "" -> one empty argument)
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c in BLANKS:
            if in_word:
                words.append("".join(word))
                word, in_word = [], False
            i += 1
        elif c == "\\":
            if i + 1 == n:   # a lone backslash at the end: sh keeps it
                word.append(c)
                in_word = True
                i += 1
            elif line[i + 1] == "\n":   # a line continuation: both go
                i += 2
            else:
                word.append(line[i + 1])
                in_word = True
                i += 2
        elif c == "'":
            end = line.find("'", i + 1)
            if end < 0:
                raise ValueError("No closing quotation")
            word.append(line[i + 1:end])
            in_word = True
            i = end + 1
        elif c == '"':
            i += 1
            while True:
                if i >= n:
                    raise ValueError("No closing quotation")
                c = line[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\" and i + 1 < n and line[i + 1] in DQUOTE_ESCAPES:
                    if line[i + 1] != "\n":
                        word.append(line[i + 1])
                    i += 2
                else:
                    word.append(c)
                    i += 1
            in_word = True
        else:
            word.append(c)
            in_word = True
            i += 1
    if in_word:
        words.append("".join(word))
    return words
