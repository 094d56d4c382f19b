"""PTX parser: text to the syntax tree of ``gpusafe_instrument.nodes``.

Built for speed on compiler output, where most statements are one-line
instructions: a single regular expression recognises such a line and its
operands are parsed once per distinct spelling (an operand cache), so a
module of tens of megabytes parses in seconds.  Everything else (directives,
declarations, vector operands, multi-line ``call`` sequences) goes through a
small tokenizer and recursive descent.

Each node keeps the exact text it came from (``raw``) and the whitespace and
comments before it (``lead``); the printer writes those back, which is what
makes ``emit(parse(text)) == text``.

Anything the parser does not understand raises :class:`ParseError` with the
line, the column and the offending line's text.  Nothing is skipped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from .isa import INSTRUCTIONS, NEWEST_PTX_ISA, newer_than_known
from .nodes import (
    SCALAR_SIZES,
    SECTION_BODY,
    Address,
    AddressSize,
    ArgumentList,
    Block,
    File,
    Function,
    Guard,
    Immediate,
    Initializer,
    Instruction,
    Item,
    Label,
    Loc,
    Module,
    Negated,
    Operand,
    Param,
    Pragma,
    PredicatePair,
    Prototype,
    Register,
    RegisterDecl,
    Section,
    Sink,
    Statement,
    Symbol,
    SymbolOffset,
    Target,
    Targets,
    TextureOperand,
    Variable,
    Vector,
    Version,
)


class ParseError(Exception):
    """A PTX construct the parser cannot read; names the line and column."""

    def __init__(self, message: str, line: int, column: int, line_text: str) -> None:
        self.message = message
        self.line = line
        self.column = column
        self.line_text = line_text
        pointer = " " * (column - 1) + "^"
        super().__init__(
            f"line {line}, column {column}: {message}\n    {line_text}\n    {pointer}"
        )


# ---------------------------------------------------------------------------
# Lexical pieces

_TRIVIA = re.compile(r"(?:[ \t\r\n\f\v]+|//[^\n]*|/\*.*?\*/)*", re.S)

_NUMBER = (
    r"0[fF][0-9A-Fa-f]{8}|0[dD][0-9A-Fa-f]{16}|0[xX][0-9A-Fa-f]+U?|0[bB][01]+U?"
    r"|[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|[0-9]+U?"
)
_IDENT = r"[A-Za-z][\w$]*|[_$][\w$]+"
_REGISTER = r"%[\w$]+(?:\.[xyzw])?"

# The general tokenizer: kinds are decided by the first character.
_TOKEN = re.compile(
    rf"(?P<num>(?:{_NUMBER})(?![\w$.]))"
    rf"|(?P<dir>\.[A-Za-z_][\w$]*(?:(?:\.|::)[A-Za-z_][\w$]*)*)"
    rf"|(?P<reg>{_REGISTER})"
    rf"|(?P<id>(?:{_IDENT}|_)(?:(?:\.|::)[\w$]+)*)"
    r'|(?P<str>"(?:[^"\\\n]|\\.)*")'
    r"|(?P<punct>[{}\[\]();,:<>=+\-!|@*])"
)

# A one-line instruction without braces, parentheses, strings or comments.
_FAST_INSTR = re.compile(
    r"(?:@(!?)(%[\w$]+)[ \t]+)?([a-z][\w]*(?:\.[\w:]+)*)(?:([ \t]+)([^;{}()\"\n/]*?))?[ \t]*;"
)
_LABEL = re.compile(r"([A-Za-z_$][\w$]*)[ \t]*:(?!:)")
_LOC = re.compile(
    r"\.loc[ \t]+(\d+)[ \t]+(\d+)[ \t]+(\d+)"
    r"(?:[ \t]*,[ \t]*function_name[ \t]+([\w$.]+)"
    r"(?:[ \t]*,[ \t]*inlined_at[ \t]+(\d+)[ \t]+(\d+)[ \t]+(\d+))?)?"
    r"(?=[ \t]*(?:\n|//|$))"
)
_NUMBER_LIST = re.compile(
    rf"\{{[ \t\n]*(-?(?:{_NUMBER})(?:[ \t\n]*,[ \t\n]*-?(?:{_NUMBER}))*)[ \t\n]*\}}"
)
_FAST_VAR = re.compile(
    r"((?:\.(?:visible|extern|weak|common)[ \t]+)*)"
    r"(\.global|\.const|\.shared|\.local)[ \t]+(?:\.align[ \t]+(\d+)[ \t]+)?"
    r"(?:(\.v[248])[ \t]+)?(\.[a-z]+\d*(?:x2)?)[ \t]+([A-Za-z_$][\w$]*)((?:\[\d*\])*)"
    rf"(?:[ \t]*=[ \t]*(-?(?:{_NUMBER})|\{{[ \t]*-?(?:{_NUMBER})(?:[ \t]*,[ \t]*-?(?:{_NUMBER}))*[ \t]*\}}))?"
    r"[ \t]*;"
)
_FAST_REG = re.compile(
    rf"\.reg[ \t]+(?:(\.v[248])[ \t]+)?(\.[a-z]+[0-9]*(?:x2)?)[ \t]+({_REGISTER}|{_IDENT})"
    r"(?:<(\d+)>)?[ \t]*;"
)
_REG_RANGE = re.compile(rf"({_REGISTER})<(\d+)>")
_OPERAND_SIMPLE = re.compile(rf"{_REGISTER}$")
_IMM = re.compile(rf"-?(?:{_NUMBER})$")
_ADDR = re.compile(
    rf"\[[ \t]*(?:({_REGISTER})|({_IDENT}))?[ \t]*(?:([+-])[ \t]*(-?(?:{_NUMBER})))?[ \t]*\]$"
)
_ADDR_IMM = re.compile(rf"\[[ \t]*(-?(?:{_NUMBER}))[ \t]*\]$")
_SYM = re.compile(rf"(?:{_IDENT})$")
_SYM_OFF = re.compile(rf"({_IDENT})[ \t]*([+-])[ \t]*((?:{_NUMBER}))$")

_LINKAGE = {".visible", ".extern", ".weak", ".common"}
_SPACES = {".global", ".const", ".shared", ".local", ".param", ".tex", ".reg"}
_PERF = {
    ".maxntid", ".reqntid", ".minnctapersm", ".maxnctapersm", ".maxnreg", ".noreturn",
    ".explicitcluster", ".reqnctapercluster", ".maxclusterrank", ".blocksareclusters",
}
_TYPES = {"." + t for t in SCALAR_SIZES} | {".texref", ".samplerref", ".surfref"}


# Operands are immutable, and a program's modules spell the same ones over and
# over (``%r1``, ``[%rd2+4]``): parsed spellings are shared by every parse.
_OPERAND_CACHE: dict[str, Operand] = {}
_OPERANDS_CACHE: dict[str, tuple[Operand, ...]] = {}
_CACHE_LIMIT = 1 << 18


class _Tok:
    __slots__ = ("kind", "text", "start", "end")

    def __init__(self, kind: str, text: str, start: int, end: int) -> None:
        self.kind = kind
        self.text = text
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"<{self.kind} {self.text!r}>"


class _NotAnInteger(Exception):
    """A float literal where PTX wants an integer; turned into a ParseError."""


def _int_literal(text: str) -> int:
    v = Immediate(text).value
    if not isinstance(v, int):
        raise _NotAnInteger(text)
    return v


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.n = len(text)
        # line bookkeeping: position of the last counted newline
        self._line_pos = 0
        self._line_no = 1
        if len(_OPERAND_CACHE) > _CACHE_LIMIT:
            _OPERAND_CACHE.clear()
        if len(_OPERANDS_CACHE) > _CACHE_LIMIT:
            _OPERANDS_CACHE.clear()
        self.operand_cache = _OPERAND_CACHE
        self.operands_cache = _OPERANDS_CACHE
        self.trailing = ""  # the text after the last item, once they are all read
        self.opcodes: dict[str, str] = {}  # the opcodes seen, each checked once
        self.leads: dict[str, str] = {}

    # -- positions and errors ---------------------------------------------

    def line_of(self, pos: int) -> int:
        if pos >= self._line_pos:
            self._line_no += self.text.count("\n", self._line_pos, pos)
        else:
            self._line_no -= self.text.count("\n", pos, self._line_pos)
        self._line_pos = pos
        return self._line_no

    def error(self, message: str, pos: int) -> ParseError:
        pos = min(pos, self.n)
        line = self.text.count("\n", 0, pos) + 1
        start = self.text.rfind("\n", 0, pos) + 1
        end = self.text.find("\n", pos)
        if end < 0:
            end = self.n
        return ParseError(message, line, pos - start + 1, self.text[start:end].rstrip("\r"))

    def skip_trivia(self, pos: int) -> int:
        end = _TRIVIA.match(self.text, pos).end()
        if self.text.startswith("/*", end):
            raise self.error("unterminated block comment", end)
        return end

    # -- the general tokenizer ----------------------------------------------

    def token(self, pos: int) -> _Tok | None:
        """The token at ``pos`` after trivia, or None at end of input."""
        pos = self.skip_trivia(pos)
        if pos >= self.n:
            return None
        m = _TOKEN.match(self.text, pos)
        if m is None:
            raise self.error(f"unexpected character {self.text[pos]!r}", pos)
        kind = m.lastgroup
        assert kind is not None
        return _Tok(kind, m.group(), pos, m.end())

    def tokens_until(self, pos: int, stop: str) -> tuple[list[_Tok], int]:
        """Tokens from ``pos`` up to the first top-level ``stop`` punctuation
        (returned position is just after it)."""
        toks: list[_Tok] = []
        while True:
            t = self.token(pos)
            if t is None:
                raise self.error(f"expected '{stop}' before end of input", self.n)
            pos = t.end
            if t.kind == "punct" and t.text == stop:
                return toks, pos
            toks.append(t)

    # -- module -------------------------------------------------------------

    def items(self) -> Iterator[Item]:
        """The module's items one by one (then ``trailing``: the text after
        the last)."""
        text = self.text
        pos = 0
        first = True
        while True:
            start = self.skip_trivia(pos)
            if start >= self.n:
                if first:
                    raise self.error("no PTX here: a module starts with .version", start)
                self.trailing = text[pos:]
                return
            lead = text[pos:start]
            item, pos = self.parse_item(start)
            if first and type(item) is not Version:
                raise self.error("a PTX module starts with .version", start)
            first = False
            object.__setattr__(item, "lead", lead)
            yield item

    def parse_item(self, start: int) -> tuple[Item, int]:
        text = self.text
        t = self.token(start)
        assert t is not None
        line = self.line_of(start)
        if t.kind != "dir":
            raise self.error(f"expected a directive at module scope, found {t.text!r}", start)
        d = t.text
        if d == ".version":
            m = re.compile(r"\.version[ \t]+(\d+\.\d+)").match(text, start)
            if not m:
                raise self.error("malformed .version", start)
            version = Version(m.group(1), line=line)
            if newer_than_known(version.number):
                newest = "{}.{}".format(*NEWEST_PTX_ISA)
                raise self.error(f"PTX ISA {version.text} is newer than {newest}, the newest "
                                 f"gpusafe reads", m.start(1))
            return self._done(version, start, m.end())
        if d == ".target":
            m = re.compile(r"\.target[ \t]+([\w]+(?:[ \t]*,[ \t]*[\w]+)*)").match(text, start)
            if not m:
                raise self.error("malformed .target", start)
            targets = tuple(s.strip() for s in m.group(1).split(","))
            return self._done(Target(targets, line=line), start, m.end())
        if d == ".address_size":
            m = re.compile(r"\.address_size[ \t]+(32|64)\b").match(text, start)
            if not m:
                raise self.error("malformed .address_size (expected 32 or 64)", start)
            return self._done(AddressSize(int(m.group(1)), line=line), start, m.end())
        if d == ".file":
            m = re.compile(
                r'\.file[ \t]+(\d+)[ \t]+"((?:[^"\\\n]|\\.)*)"((?:[ \t]*,[ \t]*\d+)*)'
            ).match(text, start)
            if not m:
                raise self.error("malformed .file", start)
            extra = tuple(int(x) for x in re.findall(r"\d+", m.group(3)))
            return self._done(File(int(m.group(1)), m.group(2), extra, line=line), start, m.end())
        if d == ".section":
            return self.parse_section(start, line)
        if d == ".pragma":
            return self.parse_pragma(start, line)
        if d in _LINKAGE or d in (".entry", ".func") or d in _SPACES:
            return self.parse_declaration(start, line)
        raise self.error(f"unsupported module-level directive {d}", start)

    def _done(self, node, start: int, end: int):  # type: ignore[no-untyped-def]
        return self._set_raw(node, start, end), end

    def _set_raw(self, node, start: int, end: int):  # type: ignore[no-untyped-def]
        object.__setattr__(node, "raw", self.text[start:end])
        return node

    # -- section (DWARF data) -------------------------------------------------

    def parse_section(self, start: int, line: int) -> tuple[Section, int]:
        t = self.token(start)
        assert t is not None
        name_tok = self.token(t.end)
        if name_tok is None or name_tok.kind != "dir":
            raise self.error("expected a section name after .section", t.end)
        brace = self.token(name_tok.end)
        if brace is None or brace.text != "{":
            raise self.error("expected '{' after the section name", name_tok.end)
        body = SECTION_BODY.match(self.text, brace.end)
        end = body.end()
        if not self.text.startswith("}", end):
            if end >= self.n:
                raise self.error("unterminated .section", start)
            raise self.error("expected a label or a .b8/.b16/.b32/.b64 list in .section", end)
        node = Section(name_tok.text, body.group(), line=line)
        return self._set_raw(node, start, end + 1), end + 1

    # -- pragma ---------------------------------------------------------------

    def parse_pragma(self, start: int, line: int) -> tuple[Pragma, int]:
        t = self.token(start)
        assert t is not None
        toks, end = self.tokens_until(t.end, ";")
        strings = [x.text for x in toks if x.kind == "str"]
        if not strings or any(x.kind not in ("str", "punct") or
                              (x.kind == "punct" and x.text != ",") for x in toks):
            raise self.error('malformed .pragma (expected .pragma "..."; )', start)
        return self._set_raw(Pragma(tuple(strings), line=line), start, end), end

    # -- declarations: variables and functions ---------------------------------

    def parse_declaration(self, start: int, line: int) -> tuple[Item, int]:
        m = _FAST_VAR.match(self.text, start)
        if m is not None and m.group(5) in _TYPES:
            init: Initializer | None = m.group(8)
            if init is not None and init.startswith("{"):
                init = tuple(v.strip() for v in init[1:-1].split(","))
            dims = tuple(int(d[1:]) if d != "[" else None
                         for d in m.group(7).split("]")[:-1]) if m.group(7) else ()
            var = Variable(
                space=m.group(2), type=m.group(5), name=m.group(6),
                align=int(m.group(3)) if m.group(3) else None, vector=m.group(4),
                dims=dims, init=init, linkage=tuple(m.group(1).split()), line=line,
            )
            return self._set_raw(var, start, m.end()), m.end()
        linkage: list[str] = []
        pos = start
        t = self.token(pos)
        while t is not None and t.text in _LINKAGE:
            linkage.append(t.text)
            pos = t.end
            t = self.token(pos)
        if t is None:
            raise self.error("declaration ends early", pos)
        if t.text in (".entry", ".func"):
            return self.parse_function(start, line, tuple(linkage), t)
        if t.text in _SPACES:
            var, end = self.parse_variable(t.start, line, tuple(linkage))
            return self._set_raw(var, start, end), end
        raise self.error(f"expected .entry, .func or a state space, found {t.text!r}", t.start)

    def parse_variable(
        self, pos: int, line: int, linkage: tuple[str, ...] = ()
    ) -> tuple[Variable, int]:
        space_tok = self.token(pos)
        assert space_tok is not None
        space = space_tok.text
        pos = space_tok.end
        align: int | None = None
        vector: str | None = None
        type_: str | None = None
        attributes: list[str] = []
        while True:
            t = self.token(pos)
            if t is None:
                raise self.error("variable declaration ends early", pos)
            if t.kind != "dir":
                break
            pos = t.end
            if t.text == ".align":
                n = self.token(pos)
                if n is None or n.kind != "num":
                    raise self.error("expected a number after .align", pos)
                align = _int_literal(n.text)
                pos = n.end
            elif t.text in (".v2", ".v4", ".v8"):
                vector = t.text
            elif t.text in _TYPES:
                type_ = t.text
            elif t.text == ".attribute":
                toks, pos = self.tokens_until(pos, ")")
                attributes.append(".attribute" + "".join(x.text for x in toks) + ")")
            elif t.text.startswith(".ptr"):
                attributes.append(t.text)
            else:
                raise self.error(f"unsupported qualifier {t.text} in a declaration", t.start)
        if type_ is None:
            raise self.error("variable declaration without a type", pos)
        if t.kind != "id" or "." in t.text:
            raise self.error(f"expected a variable name, found {t.text!r}", t.start)
        name = t.text
        pos = t.end
        dims: list[int | None] = []
        t = self.token(pos)
        while t is not None and t.text == "[":
            n = self.token(t.end)
            if n is not None and n.text == "]":
                dims.append(None)
                pos = n.end
            elif n is not None and n.kind == "num":
                close = self.token(n.end)
                if close is None or close.text != "]":
                    raise self.error("expected ']'", n.end)
                dims.append(_int_literal(n.text))
                pos = close.end
            else:
                raise self.error("expected an array size", t.end)
            t = self.token(pos)
        init: Initializer | None = None
        if t is not None and t.text == "=":
            init, pos = self.parse_initializer(t.end)
            t = self.token(pos)
        if t is None or t.text != ";":
            raise self.error("expected ';' after the declaration", pos)
        var = Variable(
            space=space, type=type_, name=name, align=align, vector=vector,
            dims=tuple(dims), init=init, linkage=linkage, attributes=tuple(attributes),
            line=line,
        )
        return var, t.end

    def parse_initializer(self, pos: int) -> tuple[Initializer, int]:
        m = _NUMBER_LIST.match(self.text, self.skip_trivia(pos))
        if m is not None:  # the common case: a flat list of numbers
            return tuple(v.strip() for v in m.group(1).split(",")), m.end()
        t = self.token(pos)
        if t is None:
            raise self.error("initializer ends early", pos)
        if t.text == "{":
            items: list[Initializer] = []
            pos = t.end
            nxt = self.token(pos)
            if nxt is not None and nxt.text == "}":
                return (), nxt.end
            while True:
                item, pos = self.parse_initializer(pos)
                items.append(item)
                t = self.token(pos)
                if t is None:
                    raise self.error("unterminated initializer list", pos)
                pos = t.end
                if t.text == "}":
                    return tuple(items), pos
                if t.text != ",":
                    raise self.error("expected ',' or '}' in an initializer list", t.start)
        # a scalar: tokens up to a top-level ',', '}' or ';'
        start = t.start
        depth = 0
        end = start
        while True:
            t = self.token(end)
            if t is None:
                raise self.error("initializer ends early", end)
            if t.text == "(":
                depth += 1
            elif t.text == ")":
                depth -= 1
            elif depth == 0 and t.text in (",", "}", ";"):
                break
            elif t.kind not in ("num", "id", "punct") or t.text in ("{", "[", "]"):
                raise self.error(f"unexpected {t.text!r} in an initializer", t.start)
            end = t.end
        if end == start:
            raise self.error("empty initializer", start)
        text = self.text[start:end]
        if not re.fullmatch(
            rf"(?:-?(?:{_NUMBER})|(?:generic\([ \t]*(?:{_IDENT})[ \t]*\)|{_IDENT})"
            rf"(?:[ \t]*[+-][ \t]*(?:{_NUMBER}))?)",
            text,
        ):
            raise self.error(f"unsupported initializer {text!r}", start)
        return text, end

    def parse_params(self, pos: int, allow_reg: bool = True) -> tuple[list[Param], int]:
        """A parenthesised parameter list starting at '('."""
        t = self.token(pos)
        assert t is not None and t.text == "("
        pos = t.end
        params: list[Param] = []
        t = self.token(pos)
        if t is not None and t.text == ")":
            return params, t.end
        while True:
            p, pos = self.parse_param(pos, allow_reg)
            params.append(p)
            t = self.token(pos)
            if t is None:
                raise self.error("unterminated parameter list", pos)
            pos = t.end
            if t.text == ")":
                return params, pos
            if t.text != ",":
                raise self.error("expected ',' or ')' in a parameter list", t.start)

    def parse_param(self, pos: int, allow_reg: bool) -> tuple[Param, int]:
        t = self.token(pos)
        if t is None or t.text not in ((".param", ".reg") if allow_reg else (".param",)):
            raise self.error("expected .param", pos)
        space = t.text
        pos = t.end
        align = None
        vector = None
        type_ = None
        ptr: list[str] = []
        while True:
            t = self.token(pos)
            if t is None:
                raise self.error("parameter ends early", pos)
            if t.kind != "dir":
                break
            pos = t.end
            if t.text == ".align" and not ptr:
                n = self.token(pos)
                if n is None or n.kind != "num":
                    raise self.error("expected a number after .align", pos)
                align = _int_literal(n.text)
                pos = n.end
            elif t.text in (".v2", ".v4", ".v8"):
                vector = t.text
            elif t.text in _TYPES and type_ is None:
                type_ = t.text
            elif t.text.startswith(".ptr") or (ptr and t.text in (".global", ".shared",
                                                                  ".const", ".local", ".align")):
                ptr.append(t.text)
                if t.text.endswith(".align") or t.text == ".align":
                    n = self.token(pos)
                    if n is None or n.kind != "num":
                        raise self.error("expected a number after .align", pos)
                    ptr.append(n.text)
                    pos = n.end
            else:
                raise self.error(f"unsupported qualifier {t.text} in a parameter", t.start)
        if type_ is None:
            raise self.error("parameter without a type", t.start)
        if t.kind != "id" or "." in t.text:
            raise self.error(f"expected a parameter name, found {t.text!r}", t.start)
        name = t.text
        pos = t.end
        dims: list[int] = []
        t = self.token(pos)
        while t is not None and t.text == "[":
            n = self.token(t.end)
            close = self.token(n.end) if n is not None else None
            if n is None or n.kind != "num" or close is None or close.text != "]":
                raise self.error("expected [N] in a parameter", t.start)
            dims.append(_int_literal(n.text))
            pos = close.end
            t = self.token(pos)
        return Param(name, type_, space, align, tuple(dims), tuple(ptr), vector), pos

    def parse_function(
        self, start: int, line: int, linkage: tuple[str, ...], kind_tok: _Tok
    ) -> tuple[Function, int]:
        pos = kind_tok.end
        returns: list[Param] | None = None
        t = self.token(pos)
        if t is not None and t.text == "(" and kind_tok.text == ".func":
            returns, pos = self.parse_params(pos)
            t = self.token(pos)
        if t is None or t.kind != "id" or "." in t.text:
            raise self.error("expected a function name", pos)
        name = t.text
        pos = t.end
        params: list[Param] = []
        t = self.token(pos)
        if t is not None and t.text == "(":
            params, pos = self.parse_params(pos)
            t = self.token(pos)
        directives: list[tuple[str, tuple[int, ...]]] = []
        while t is not None and t.kind == "dir":
            if t.text not in _PERF:
                raise self.error(f"unsupported function directive {t.text}", t.start)
            pos = t.end
            values: list[int] = []
            nt = self.token(pos)
            while nt is not None and nt.kind == "num":
                values.append(_int_literal(nt.text))
                pos = nt.end
                nt = self.token(pos)
                if nt is not None and nt.text == ",":
                    nt2 = self.token(nt.end)
                    if nt2 is None or nt2.kind != "num":
                        break
                    pos = nt.end
                    nt = nt2
            directives.append((t.text, tuple(values)))
            t = nt
        if t is None:
            raise self.error("function declaration ends early", pos)
        header_end = pos
        fn = Function(
            kind=kind_tok.text, name=name, params=params, returns=returns,
            linkage=linkage, directives=tuple(directives), line=line,
        )
        fn.header_raw = self.text[start:header_end]
        fn.header_key = fn.header_state()
        fn.body_lead = self.text[header_end:t.start]
        if t.text == ";":
            return fn, t.end
        if t.text != "{":
            raise self.error(f"expected '{{' or ';' after the function header, found {t.text!r}",
                             t.start)
        body, close_lead, end = self.parse_body(t.end)
        fn.body = body
        fn.close_lead = close_lead
        return fn, end

    # -- bodies ---------------------------------------------------------------

    def parse_body(self, pos: int) -> tuple[list[Statement], str, int]:
        """Statements up to the matching '}'; returns (statements, lead of '}', end)."""
        text = self.text
        out: list[Statement] = []
        append = out.append
        fast = _FAST_INSTR.match
        ops_cache = self.operands_cache
        opcodes = self.opcodes
        leads = self.leads
        while True:
            start = _TRIVIA.match(text, pos).end()
            if start >= self.n:
                raise self.error("missing '}' at end of function body", self.n)
            c = text[start]
            if c == "}":
                return out, text[pos:start], start + 1
            lead = text[pos:start]
            if len(lead) < 8:  # one string for the "\n\t" of every statement
                lead = leads.setdefault(lead, lead)
            if c == ".":
                stmt, end = self.parse_body_directive(start)
            elif c == "{":
                line = self.line_of(start)
                stmts, close_lead, end = self.parse_body(start + 1)
                stmt = Block(stmts, line=line, lead=lead, close_lead=close_lead)
                append(stmt)
                pos = end
                continue
            elif c == "/" and text.startswith("/*", start):
                raise self.error("unterminated block comment", start)
            else:
                m = fast(text, start)
                if m is not None:
                    end = m.end()
                    neg, g, opcode, _, ops_text = m.groups()
                    known = opcodes.get(opcode)
                    if known is None:
                        known = self.known_opcode(opcode, m.start(3))
                    opcode = known
                    if ops_text:
                        operands = ops_cache.get(ops_text)
                        if operands is None:
                            operands = self.fast_operands(ops_text, m.start(5))
                            ops_cache[ops_text] = operands
                    else:
                        operands = ()
                    guard = Guard(g, neg == "!") if g else None
                    stmt = Instruction(opcode, operands, guard, line=self.line_of(start),
                                       lead=lead)
                    object.__setattr__(stmt, "raw", text[start:end])
                    append(stmt)
                    pos = end
                    continue
                else:
                    lm = _LABEL.match(text, start)
                    if lm is not None:
                        after = self.skip_trivia(lm.end())
                        if text.startswith(".callprototype", after):
                            stmt, end = self.parse_prototype(start, lm.group(1), after)
                        else:
                            stmt = Label(lm.group(1), line=self.line_of(start))
                            end = lm.end()
                    else:
                        stmt, end = self.parse_instruction_slow(start)
            object.__setattr__(stmt, "raw", text[start:end])
            object.__setattr__(stmt, "lead", lead)
            append(stmt)
            pos = end

    def known_opcode(self, opcode: str, pos: int) -> str:
        """``opcode`` itself (one string for all its uses), or a ParseError
        when it names no PTX instruction."""
        if opcode.partition(".")[0] not in INSTRUCTIONS:
            raise self.error(f"unknown instruction {opcode!r}", pos)
        return self.opcodes.setdefault(opcode, opcode)

    def fast_operands(self, ops_text: str, pos: int) -> tuple[Operand, ...]:
        """The comma-separated operands of a one-line instruction at ``pos``."""
        cache = self.operand_cache
        ops = []
        for piece in ops_text.split(","):
            key = piece.strip()
            op = cache.get(key)
            if op is None:
                op = self.parse_operand_text(key, pos + piece.find(key[:1]))
                cache[key] = op
            ops.append(op)
            pos += len(piece) + 1
        return tuple(ops)

    def parse_body_directive(self, start: int) -> tuple[Statement, int]:
        text = self.text
        line = self.line_of(start)
        if text.startswith(".loc", start) and not text[start + 4:start + 5].isalnum():
            m = _LOC.match(text, start)
            if not m:
                raise self.error("malformed .loc", start)
            inl = None
            if m.group(5):
                inl = (int(m.group(5)), int(m.group(6)), int(m.group(7)))
            loc = Loc(int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4), inl,
                      line=line)
            return loc, m.end()
        t = self.token(start)
        assert t is not None
        d = t.text
        if d == ".reg" or d.startswith(".reg."):
            m = _FAST_REG.match(text, start)
            if m is not None and m.group(2) in _TYPES:
                names = ((m.group(3), int(m.group(4))),) if m.group(4) else ((m.group(3), None),)
                return RegisterDecl(m.group(2), names, m.group(1), line=line), m.end()
            return self.parse_reg_decl(start, line)
        if d in (".local", ".shared", ".param", ".global", ".const"):
            return self.parse_variable(start, line)
        if d == ".pragma":
            return self.parse_pragma(start, line)
        if d in (".branchtargets", ".calltargets"):
            toks, end = self.tokens_until(t.end, ";")
            names = [x.text for x in toks if x.kind == "id"]
            if not names or len(toks) != 2 * len(names) - 1:
                raise self.error(f"malformed {d} list", start)
            return Targets(d, tuple(names), line=line), end
        raise self.error(f"unsupported directive {d} in a function body", start)

    def parse_reg_decl(self, start: int, line: int) -> tuple[RegisterDecl, int]:
        t = self.token(start)
        assert t is not None
        pos = t.end
        # ".reg.b16" (no space, as inline assembly may write it) is ".reg .b16"
        words = ["." + w for w in t.text.split(".")[2:]]
        if len(words) > 2:
            raise self.error(f"unsupported directive {t.text}", start)

        def word() -> str | None:
            nonlocal pos
            if words:
                return words.pop(0)
            nt = self.token(pos)
            if nt is None or nt.kind != "dir":
                return None
            pos = nt.end
            return nt.text

        vector = None
        type_ = word()
        if type_ in (".v2", ".v4", ".v8"):
            vector = type_
            type_ = word()
        if type_ not in _TYPES or words:
            raise self.error("expected a register type after .reg", start if words else pos)
        names: list[tuple[str, int | None]] = []
        while True:
            p = self.skip_trivia(pos)
            m = _REG_RANGE.match(self.text, p)
            if m:
                names.append((m.group(1), int(m.group(2))))
                pos = m.end()
            else:
                t = self.token(p)
                if t is None or t.kind not in ("reg", "id"):
                    raise self.error("expected a register name in .reg", p)
                names.append((t.text, None))
                pos = t.end
            t = self.token(pos)
            if t is None:
                raise self.error("unterminated .reg", pos)
            pos = t.end
            if t.text == ";":
                return RegisterDecl(type_, tuple(names), vector, line=line), pos
            if t.text != ",":
                raise self.error("expected ',' or ';' in .reg", t.start)

    def parse_prototype(self, start: int, name: str, pos: int) -> tuple[Prototype, int]:
        line = self.line_of(start)
        t = self.token(pos)
        assert t is not None  # .callprototype
        pos = t.end
        returns = None
        t = self.token(pos)
        if t is not None and t.text == "(":
            rets, pos = self.parse_params(pos)
            returns = tuple(rets)
            t = self.token(pos)
        if t is None or t.text != "_":
            raise self.error("expected '_' in .callprototype", pos)
        params, pos = self.parse_params(t.end)
        attrs: list[str] = []
        t = self.token(pos)
        while t is not None and t.kind == "dir":
            attrs.append(t.text)
            pos = t.end
            t = self.token(pos)
        if t is None or t.text != ";":
            raise self.error("expected ';' after .callprototype", pos)
        return Prototype(name, returns, tuple(params), tuple(attrs), line=line), t.end

    def parse_instruction_slow(self, start: int) -> tuple[Instruction, int]:
        line = self.line_of(start)
        t = self.token(start)
        assert t is not None
        guard = None
        pos = start
        if t.text == "@":
            neg = False
            g = self.token(t.end)
            if g is not None and g.text == "!":
                neg = True
                g = self.token(g.end)
            if g is None or g.kind not in ("reg", "id"):
                raise self.error("expected a predicate after '@'", t.end)
            guard = Guard(g.text, neg)
            pos = g.end
            t = self.token(pos)
        if t is None or t.kind != "id" or not t.text[0].isalpha():
            found = "end of input" if t is None else repr(t.text)
            raise self.error(f"expected an instruction, found {found}", pos if t is None else t.start)
        opcode = self.known_opcode(t.text, t.start)
        toks, end = self.tokens_until(t.end, ";")
        operands: list[Operand] = []
        i = 0
        n = len(toks)
        while i < n:
            op, i = self.operand_from_tokens(toks, i)
            operands.append(op)
            if i < n:
                if toks[i].text != ",":
                    raise self.error(f"expected ',' between operands, found {toks[i].text!r}",
                                     toks[i].start)
                i += 1
                if i == n:
                    raise self.error("operand expected after ','", toks[i - 1].end)
        return Instruction(opcode, tuple(operands), guard, line=line), end

    # -- operands -------------------------------------------------------------

    def parse_operand_text(self, key: str, col_pos: int) -> Operand:
        """An operand spelled without braces/parentheses (the fast path)."""
        if not key:
            raise self.error("operand expected", col_pos)
        if _OPERAND_SIMPLE.match(key):
            return Register(key)
        if _IMM.match(key):
            return Immediate(key)
        if key.startswith("["):
            m = _ADDR.match(key)
            if m and (m.group(1) or m.group(2)):
                base: Register | Symbol = Register(m.group(1)) if m.group(1) else Symbol(m.group(2))
                off = 0
                if m.group(4):
                    off = _int_literal(m.group(4))
                    if m.group(3) == "-":
                        off = -off
                return Address(base, off)
            m = _ADDR_IMM.match(key)
            if m:
                return Address(None, _int_literal(m.group(1)))
            raise self.error(f"unsupported address operand {key!r}", col_pos)
        if key == "_":
            return Sink()
        if key.startswith("!") and _OPERAND_SIMPLE.match(key[1:].strip()):
            return Negated(Register(key[1:].strip()))
        if "|" in key:
            a, _, b = key.partition("|")
            a, b = a.strip(), b.strip()
            halves = [self._pair_half(x) for x in (a, b)]
            if None not in halves:
                return PredicatePair(*halves)  # type: ignore[arg-type]
        if _SYM.match(key):
            return Symbol(key)
        m = _SYM_OFF.match(key)
        if m:
            off = _int_literal(m.group(3))
            return SymbolOffset(m.group(1), -off if m.group(2) == "-" else off)
        raise self.error(f"unsupported operand {key!r}", col_pos)

    @staticmethod
    def _pair_half(text: str) -> Register | Symbol | Sink | None:
        """One side of ``p|q``: a ``%`` register, a register named without
        ``%`` (inline asm declares ``.reg .pred p;``), or ``_``."""
        if text == "_":
            return Sink()
        if _OPERAND_SIMPLE.match(text):
            return Register(text)
        if _SYM.match(text):
            return Symbol(text)
        return None

    def operand_from_tokens(self, toks: list[_Tok], i: int) -> tuple[Operand, int]:
        t = toks[i]
        if t.text in ("{", "("):
            close = "}" if t.text == "{" else ")"
            items: list[Operand] = []
            i += 1
            if i < len(toks) and toks[i].text == close:
                return (Vector(()) if close == "}" else ArgumentList(())), i + 1
            while True:
                if i >= len(toks):
                    raise self.error(f"missing '{close}'", t.start)
                item, i = self.operand_from_tokens(toks, i)
                items.append(item)
                if i >= len(toks):
                    raise self.error(f"missing '{close}'", t.start)
                if toks[i].text == close:
                    i += 1
                    break
                if toks[i].text != ",":
                    raise self.error(f"expected ',' or '{close}'", toks[i].start)
                i += 1
            if close == ")":
                return ArgumentList(tuple(items)), i
            vector = Vector(tuple(items))
            if i < len(toks) and toks[i].text == "|":
                # a vector destination and a predicate: tex's "{d0, d1, d2, d3}|p"
                if i + 1 >= len(toks):
                    raise self.error("expected a predicate after '|'", toks[i].end)
                half = self._pair_half(toks[i + 1].text)
                if half is None:
                    raise self.error("expected a predicate after '|'", toks[i + 1].start)
                return PredicatePair(vector, half), i + 2
            return vector, i
        if t.text == "[" and self._bracket_has_comma(toks, i):
            return self.texture_operand(toks, i)
        # everything else is a flat run of tokens up to ',' or a closer
        j = i
        depth = 0
        while j < len(toks):
            x = toks[j].text
            if x == "[":
                depth += 1
            elif x == "]":
                if depth == 0:
                    break  # the end of the texture operand around this one
                depth -= 1
            elif depth == 0 and x in (",", "}", ")"):
                break
            elif depth == 0 and x in ("{", "("):
                raise self.error(f"unexpected {x!r} in an operand", toks[j].start)
            j += 1
        if j == i:
            raise self.error(f"operand expected, found {t.text!r}", t.start)
        key = " ".join(x.text for x in toks[i:j])
        key = re.sub(r"\s*([\[\]+|!-])\s*", r"\1", key)
        op = self.operand_cache.get(key)
        if op is None:
            op = self.parse_operand_text(key, t.start)
            self.operand_cache[key] = op
        return op, j


    @staticmethod
    def _bracket_has_comma(toks: list[_Tok], i: int) -> bool:
        """Whether the ``[`` at ``i`` holds a comma of its own (a texture or
        surface operand) rather than an address."""
        depth = 0
        for t in toks[i:]:
            x = t.text
            if x in ("[", "{", "("):
                depth += 1
            elif x in ("]", "}", ")"):
                depth -= 1
                if depth == 0:
                    return False
            elif x == "," and depth == 1:
                return True
        return False

    def texture_operand(self, toks: list[_Tok], i: int) -> tuple[TextureOperand, int]:
        """``[handle, {coordinates}]`` or ``[handle, sampler, {coordinates}]``."""
        open_ = toks[i]
        items: list[Operand] = []
        i += 1
        while True:
            if i >= len(toks):
                raise self.error("missing ']'", open_.start)
            item, i = self.operand_from_tokens(toks, i)
            if isinstance(item, (Address, TextureOperand)):
                raise self.error("unexpected '[' inside a texture or surface operand",
                                 toks[i - 1].start)
            items.append(item)
            if i >= len(toks):
                raise self.error("missing ']'", open_.start)
            if toks[i].text == "]":
                return TextureOperand(tuple(items)), i + 1
            if toks[i].text != ",":
                raise self.error("expected ',' or ']' in a texture or surface operand",
                                 toks[i].start)
            i += 1


def parse(text: str) -> Module:
    """Parse a whole PTX module.  Raises :class:`ParseError` on anything it cannot read."""
    parser = _new_parser(text)
    items = list(_errors_named(parser, parser.items()))
    return Module(items, parser.trailing)


def parse_items(text: str) -> Iterator[Item]:
    """The items of a PTX module one at a time, each parsed in full before it
    is yielded, the same as :func:`parse`'s (raises :class:`ParseError` at
    the first thing it cannot read): a caller that looks at one function at a
    time never holds the whole tree (``gpusafe inspect`` on a module of tens
    of megabytes)."""
    parser = _new_parser(text)
    return _errors_named(parser, parser.items())


def _new_parser(text: str) -> _Parser:
    if not isinstance(text, str):
        raise TypeError("ptx.parse takes the module text as str")
    return _Parser(text)


def _errors_named(parser: _Parser, items: Iterator[Item]) -> Iterator[Item]:
    """``items``, with what went wrong inside the parser said as a ParseError."""
    text = parser.text
    try:
        yield from items
    except ParseError:
        raise
    except _NotAnInteger as e:
        pos = text.find(str(e), parser._line_pos)
        raise parser.error(f"expected an integer, found {e}", max(pos, 0)) from None
    except RecursionError:
        raise ParseError("nesting too deep", 1, 1, text.split("\n", 1)[0]) from None


ParseFn = Callable[[str], Module]
