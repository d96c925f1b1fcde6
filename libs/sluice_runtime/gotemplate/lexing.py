"""The lexer of Go's text/template, token for token.

Go's parser reports errors with the line of the token it is looking at, and
decides trim markers, comments and the end of an action in the lexer; so the
lexer here follows the Go one's states and error texts (``unclosed action``,
``bad character U+0021 '!'``) instead of being a regular expression.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from sluice_runtime.gotemplate.errors import ParseError

SPACES = " \t\r\n"
KEYWORDS = {"block", "break", "continue", "define", "else", "end", "if", "range", "nil"}
KEYWORDS |= {"template", "with"}


class T(enum.Enum):
    ERROR = "error"
    EOF = "EOF"
    TEXT = "text"
    COMMENT = "comment"
    LEFT_DELIM = "left delim"
    RIGHT_DELIM = "right delim"
    SPACE = "space"
    ASSIGN = "="
    DECLARE = ":="
    PIPE = "|"
    STRING = "string"
    RAW_STRING = "raw string"
    CHAR_CONSTANT = "char constant"
    NUMBER = "number"
    BOOL = "bool"
    FIELD = "field"
    VARIABLE = "variable"
    DOT = "."
    IDENTIFIER = "identifier"
    KEYWORD = "keyword"
    CHAR = "char"
    LEFT_PAREN = "("
    RIGHT_PAREN = ")"


@dataclass(frozen=True)
class Item:
    typ: T
    pos: int
    val: str
    line: int

    def __str__(self) -> str:
        if self.typ is T.EOF:
            return "EOF"
        if self.typ is T.ERROR:
            return self.val
        if self.typ is T.KEYWORD:
            return f"<{self.val}>"
        from sluice_runtime.gotemplate.formatting import go_quote

        if len(self.val) > 10:
            return go_quote(self.val[:10]) + "..."
        return go_quote(self.val)


def go_char(r: str) -> str:
    """Go's %#U: U+0021 '!'."""
    return f"U+{ord(r):04X} '{r}'" if r.isprintable() else f"U+{ord(r):04X}"


def is_alnum(r: str) -> bool:
    return r == "_" or r.isalpha() or r.isdigit()


class Lexer:
    def __init__(self, text: str, left: str, right: str) -> None:
        self.input = text
        self.left = left or "{{"
        self.right = right or "}}"
        self.pos = 0
        self.start = 0
        self.line = 1
        self.start_line = 1
        self.paren_depth = 0
        self.items: list[Item] = []

    # -- helpers ---------------------------------------------------------
    def emit(self, typ: T) -> None:
        val = self.input[self.start : self.pos]
        self.items.append(Item(typ, self.start, val, self.start_line))
        self.start = self.pos
        self.start_line = self.line

    def ignore(self) -> None:
        self.line += self.input.count("\n", self.start, self.pos)
        self.start = self.pos
        self.start_line = self.line

    def next(self) -> str:
        if self.pos >= len(self.input):
            self.pos += 1  # so backup works uniformly at EOF
            return ""
        r = self.input[self.pos]
        self.pos += 1
        if r == "\n":
            self.line += 1
        return r

    def backup(self) -> None:
        self.pos -= 1
        if self.pos < len(self.input) and self.input[self.pos] == "\n":
            self.line -= 1

    def peek(self) -> str:
        return self.input[self.pos] if self.pos < len(self.input) else ""

    def fail(self, message: str) -> None:
        self.items.append(Item(T.ERROR, self.start, message, self.start_line))

    def at_right_delim(self) -> tuple[bool, bool]:
        rest = self.input[self.pos :]
        if (
            len(rest) >= 2
            and rest[0] in SPACES
            and rest[1] == "-"
            and rest[2:].startswith(self.right)
        ):
            return True, True
        return rest.startswith(self.right), False

    def at_terminator(self) -> bool:
        r = self.peek()
        if r == "" or r in SPACES or r in ".,|:()":
            return True
        return self.input.startswith(self.right, self.pos)

    # -- states ----------------------------------------------------------
    def run(self) -> list[Item]:
        # Each state returns the next one, as in Go's lexer; None ends the run.
        state: Any = self.lex_text
        while state is not None:
            state = state()
        return self.items

    def lex_text(self) -> object:
        x = self.input.find(self.left, self.pos)
        if x < 0:
            self.pos = len(self.input)
            if self.pos > self.start:
                self.line += self.input.count("\n", self.start, self.pos)
                self.emit(T.TEXT)
            self.items.append(Item(T.EOF, self.pos, "", self.line))
            return None
        self.pos = x
        after = self.input[x + len(self.left) :]
        trim = len(after) >= 2 and after[0] == "-" and after[1] in SPACES
        end = self.pos
        if trim:
            while end > self.start and self.input[end - 1] in SPACES:
                end -= 1
        if end > self.start:
            self.line += self.input.count("\n", self.start, end)
            text = self.input[self.start : end]
            self.items.append(Item(T.TEXT, self.start, text, self.start_line))
        self.line += self.input.count("\n", end, self.pos)
        self.start = self.pos
        self.start_line = self.line
        return self.lex_left_delim

    def lex_left_delim(self) -> object:
        self.pos += len(self.left)
        rest = self.input[self.pos :]
        trim = len(rest) >= 2 and rest[0] == "-" and rest[1] in SPACES
        after = 2 if trim else 0
        if rest[after:].startswith("/*"):
            self.pos += after
            self.ignore()
            return self.lex_comment
        self.emit(T.LEFT_DELIM)
        self.pos += after
        self.ignore()
        self.paren_depth = 0
        return self.lex_inside_action

    def lex_comment(self) -> object:
        self.pos += 2
        x = self.input.find("*/", self.pos)
        if x < 0:
            self.fail("unclosed comment")
            return None
        self.pos = x + 2
        delim, trim = self.at_right_delim()
        if not delim:
            self.fail("comment ends before closing delimiter")
            return None
        self.line += self.input.count("\n", self.start, self.pos)
        self.emit(T.COMMENT)
        if trim:
            self.pos += 2
        self.pos += len(self.right)
        if trim:
            while self.pos < len(self.input) and self.input[self.pos] in SPACES:
                self.pos += 1
        self.ignore()
        return self.lex_text

    def lex_right_delim(self, trim: bool) -> object:
        if trim:
            self.pos += 2
            self.ignore()
        self.pos += len(self.right)
        self.emit(T.RIGHT_DELIM)
        if trim:
            while self.pos < len(self.input) and self.input[self.pos] in SPACES:
                self.pos += 1
            self.ignore()
        return self.lex_text

    def lex_inside_action(self) -> object:
        delim, trim = self.at_right_delim()
        if delim:
            if self.paren_depth == 0:
                return self.lex_right_delim(trim)
            self.fail("unclosed left paren")
            return None
        r = self.next()
        if r == "":
            self.fail("unclosed action")
            return None
        if r in SPACES:
            self.backup()
            return self.lex_space
        if r == "=":
            self.emit(T.ASSIGN)
        elif r == ":":
            if self.next() != "=":
                self.fail("expected :=")
                return None
            self.emit(T.DECLARE)
        elif r == "|":
            self.emit(T.PIPE)
        elif r == '"':
            return self.lex_quote
        elif r == "`":
            return self.lex_raw_quote
        elif r == "$":
            return self.lex_variable
        elif r == "'":
            return self.lex_char
        elif r == "." and not ("0" <= self.peek() <= "9" and self.peek() != ""):
            return self.lex_field
        elif r in "+-." or "0" <= r <= "9":
            self.backup()
            return self.lex_number
        elif is_alnum(r):
            self.backup()
            return self.lex_identifier
        elif r == "(":
            self.emit(T.LEFT_PAREN)
            self.paren_depth += 1
        elif r == ")":
            self.emit(T.RIGHT_PAREN)
            self.paren_depth -= 1
            if self.paren_depth < 0:
                self.fail(f"unexpected right paren {go_char(r)}")
                return None
        elif ord(r) < 128 and r.isprintable():
            self.emit(T.CHAR)
        else:
            self.fail(f"unrecognized character in action: {go_char(r)}")
            return None
        return self.lex_inside_action

    def lex_space(self) -> object:
        count = 0
        while self.peek() != "" and self.peek() in SPACES:
            self.next()
            count += 1
        # A space before "-}}" belongs to the trim marker, not to the action.
        rest = self.input[self.pos - 1 :]
        if len(rest) >= 2 and rest[1] == "-" and rest[2:].startswith(self.right):
            self.backup()
            if count == 1:
                return self.lex_inside_action
        self.emit(T.SPACE)
        return self.lex_inside_action

    def lex_identifier(self) -> object:
        while True:
            r = self.next()
            if not (r and is_alnum(r)):
                self.backup()
                word = self.input[self.start : self.pos]
                if not self.at_terminator():
                    self.fail(f"bad character {go_char(self.peek())}")
                    return None
                if word in KEYWORDS:
                    self.emit(T.KEYWORD)
                elif word in ("true", "false"):
                    self.emit(T.BOOL)
                else:
                    self.emit(T.IDENTIFIER)
                return self.lex_inside_action

    def lex_field(self) -> object:
        return self.lex_field_or_variable(T.FIELD)

    def lex_variable(self) -> object:
        return self.lex_field_or_variable(T.VARIABLE)

    def lex_field_or_variable(self, typ: T) -> object:
        if self.at_terminator():
            self.emit(T.VARIABLE if typ is T.VARIABLE else T.DOT)
            return self.lex_inside_action
        while True:
            r = self.next()
            if not (r and is_alnum(r)):
                self.backup()
                break
        if not self.at_terminator():
            self.fail(f"bad character {go_char(self.peek())}")
            return None
        self.emit(typ)
        return self.lex_inside_action

    def lex_char(self) -> object:
        return self.lex_escaped("'", T.CHAR_CONSTANT, "unterminated character constant")

    def lex_number(self) -> object:
        if not self.scan_number():
            self.fail(f"bad number syntax: {self.input[self.start : self.pos]!r}".replace("'", '"'))
            return None
        self.emit(T.NUMBER)
        return self.lex_inside_action

    def accept(self, valid: str) -> bool:
        r = self.next()
        if r and r in valid:
            return True
        self.backup()
        return False

    def accept_run(self, valid: str) -> None:
        while self.accept(valid):
            pass

    def scan_number(self) -> bool:
        self.accept("+-")
        digits = "0123456789_"
        if self.accept("0"):
            if self.accept("xX"):
                digits = "0123456789abcdefABCDEF_"
            elif self.accept("oO"):
                digits = "01234567_"
            elif self.accept("bB"):
                digits = "01_"
        self.accept_run(digits)
        if self.accept("."):
            self.accept_run(digits)
        if len(digits) == 11 and self.accept("eE"):
            self.accept("+-")
            self.accept_run("0123456789_")
        if len(digits) == 23 and self.accept("pP"):
            self.accept("+-")
            self.accept_run("0123456789_")
        self.accept("i")
        r = self.peek()
        if r and is_alnum(r):
            self.next()
            return False
        return True

    def lex_quote(self) -> object:
        return self.lex_escaped('"', T.STRING, "unterminated quoted string")

    def lex_escaped(self, close: str, token: T, problem: str) -> object:
        """A constant up to `close` on one line, backslash escapes skipped: Go's
        lexChar and lexQuote, which differ only in these three."""
        while True:
            r = self.next()
            if r == "\\":
                r = self.next()
                if r not in ("", "\n"):
                    continue
            if r in ("", "\n"):
                self.fail(problem)
                return None
            if r == close:
                break
        self.emit(token)
        return self.lex_inside_action

    def lex_raw_quote(self) -> object:
        x = self.input.find("`", self.pos)
        if x < 0:
            self.fail("unterminated raw quoted string")
            return None
        self.pos = x + 1
        self.line += self.input.count("\n", self.start, self.pos)
        self.emit(T.RAW_STRING)
        return self.lex_inside_action


def lex(text: str, left: str, right: str) -> list[Item]:
    items = Lexer(text, left, right).run()
    if items and items[-1].typ is T.ERROR:
        return items
    return items


__all__ = ["SPACES", "Item", "Lexer", "ParseError", "T", "lex"]
