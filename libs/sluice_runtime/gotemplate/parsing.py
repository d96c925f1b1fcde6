"""The parser of Go's text/template: items to trees, with Go's error texts."""

from __future__ import annotations

from collections.abc import Callable

from sluice_runtime.gotemplate import nodes as n
from sluice_runtime.gotemplate.errors import ParseError
from sluice_runtime.gotemplate.lexing import Item, T, lex
from sluice_runtime.gotemplate.literals import parse_number, unquote

_OPERAND_START = {
    T.BOOL,
    T.CHAR_CONSTANT,
    T.DOT,
    T.FIELD,
    T.IDENTIFIER,
    T.NUMBER,
    T.RAW_STRING,
    T.STRING,
    T.VARIABLE,
    T.LEFT_PAREN,
}


def _q(text: str) -> str:
    from sluice_runtime.gotemplate.formatting import go_quote

    return go_quote(text)


class Parser:
    def __init__(self, name: str, text: str, left: str, right: str, funcs: set[str]) -> None:
        self.name = name
        self.text = text
        self.items = lex(text, left, right)
        self.i = 0
        self.last: Item = self.items[0]
        self.funcs = funcs
        self.vars: list[str] = ["$"]
        self.range_depth = 0
        self.action_line = 0
        self.trees: dict[str, n.Tree] = {}

    # -- token stream ------------------------------------------------------
    def next(self) -> Item:
        item = self.items[min(self.i, len(self.items) - 1)]
        self.i += 1
        self.last = item
        return item

    def backup(self, count: int = 1) -> None:
        self.i -= count

    def peek(self) -> Item:
        return self.items[min(self.i, len(self.items) - 1)]

    def next_non_space(self) -> Item:
        item = self.next()
        while item.typ is T.SPACE:
            item = self.next()
        return item

    def peek_non_space(self) -> Item:
        item = self.next_non_space()
        self.backup()
        return item

    def errorf(self, message: str) -> ParseError:
        return ParseError(f"template: {self.name}:{self.last.line}: {message}")

    def unexpected(self, item: Item, context: str) -> ParseError:
        if item.typ is T.ERROR:
            extra = ""
            if self.action_line and self.action_line != item.line:
                extra = f" in action started at {self.name}:{self.action_line}"
                if item.val.endswith(" action"):
                    extra = extra[len(" in action") :]
            return self.errorf(f"{item}{extra}")
        return self.errorf(f"unexpected {item} in {context}")

    def expect(self, typ: T, context: str) -> Item:
        item = self.next_non_space()
        if item.typ is not typ:
            raise self.unexpected(item, context)
        return item

    def is_keyword(self, item: Item, word: str) -> bool:
        return item.typ is T.KEYWORD and item.val == word

    # -- templates -----------------------------------------------------------
    def parse(self) -> dict[str, n.Tree]:
        root = n.ListNode(0)
        while self.peek().typ is not T.EOF:
            if self.peek().typ is T.LEFT_DELIM:
                start = self.i
                delim = self.next()
                if self.is_keyword(self.peek_non_space(), "define"):
                    self.next_non_space()
                    self.action_line = delim.line
                    self.parse_definition()
                    self.action_line = 0
                    continue
                self.i = start
            node = self.text_or_action()
            if isinstance(node, _End | _Else):
                raise self.errorf(f"unexpected {node}")
            root.nodes.append(node)
        self.add(n.Tree(self.name, self.name, self.text, root))
        return self.trees

    def add(self, tree: n.Tree) -> None:
        old = self.trees.get(tree.name)
        if old is None or is_empty(old.root):
            self.trees[tree.name] = tree
        elif not is_empty(tree.root):
            raise self.errorf(f"template: multiple definition of template {_q(tree.name)}")

    def parse_definition(self) -> None:
        context = "define clause"
        item = self.next_non_space()
        if item.typ not in (T.STRING, T.RAW_STRING):
            raise self.unexpected(item, context)
        name = self.unquote(item)
        self.expect(T.RIGHT_DELIM, context)
        self.definition_body(name, context)

    def definition_body(self, name: str, context: str) -> None:
        """The body of a `define` or `block` up to its `end`, added as template `name`
        (Go's parseDefinition); only `$` is in scope inside it."""
        saved_vars, self.vars = self.vars, ["$"]
        body, end = self.item_list()
        self.vars = saved_vars
        if not isinstance(end, _End):
            raise self.errorf(f"unexpected {end} in {context}")
        self.add(n.Tree(name, self.name, self.text, body))

    def item_list(self) -> tuple[n.ListNode, n.Node]:
        body = n.ListNode(self.peek_non_space().pos)
        while self.peek_non_space().typ is not T.EOF:
            node = self.text_or_action()
            if isinstance(node, _End | _Else):
                return body, node
            body.nodes.append(node)
        raise self.errorf("unexpected EOF")

    def text_or_action(self) -> n.Node:
        item = self.next_non_space()
        if item.typ is T.TEXT:
            return n.TextNode(item.pos, text=item.val)
        if item.typ is T.LEFT_DELIM:
            saved, self.action_line = self.action_line, item.line
            try:
                return self.action()
            finally:
                self.action_line = saved
        if item.typ is T.COMMENT:
            return n.CommentNode(item.pos, text=item.val)
        raise self.unexpected(item, "input")

    def action(self) -> n.Node:
        item = self.next_non_space()
        if item.typ is T.KEYWORD:
            handlers: dict[str, Callable[[], n.Node]] = {
                "block": self.block_control,
                "break": self.break_control,
                "continue": self.continue_control,
                "else": self.else_control,
                "end": self.end_control,
                "if": lambda: self.branch("if", allow_else=("if",)),
                "range": lambda: self.branch("range", allow_else=()),
                "template": self.template_control,
                "with": lambda: self.branch("with", allow_else=("with",)),
            }
            handler = handlers.get(item.val)
            if handler is not None:
                return handler()
        self.backup()
        pipe = self.pipeline("command", T.RIGHT_DELIM)
        return n.ActionNode(item.pos, line=item.line, pipe=pipe)

    def break_control(self) -> n.Node:
        return self.loop_control("break", n.BreakNode)

    def continue_control(self) -> n.Node:
        return self.loop_control("continue", n.ContinueNode)

    def loop_control(self, word: str, kind: type[n.Node]) -> n.Node:
        pos = self.last.pos
        item = self.next_non_space()
        if item.typ is not T.RIGHT_DELIM:
            raise self.unexpected(item, "{{" + word + "}}")
        if self.range_depth == 0:
            raise self.errorf("{{" + word + "}} outside {{range}}")
        return kind(pos)

    def else_control(self) -> n.Node:
        peek = self.peek_non_space()
        # "else if" and "else with" leave the keyword for the enclosing branch.
        if self.is_keyword(peek, "if") or self.is_keyword(peek, "with"):
            return _Else(peek.pos, line=peek.line)
        item = self.expect(T.RIGHT_DELIM, "else")
        return _Else(item.pos, line=item.line)

    def end_control(self) -> n.Node:
        return _End(self.expect(T.RIGHT_DELIM, "end").pos)

    def branch(self, kind: str, allow_else: tuple[str, ...]) -> n.Node:
        mark = len(self.vars)
        try:
            pipe = self.pipeline(kind, T.RIGHT_DELIM)
            if kind == "range":
                self.range_depth += 1
            body, nxt = self.item_list()
            if kind == "range":
                self.range_depth -= 1
            else_body: n.ListNode | None = None
            if isinstance(nxt, _Else):
                peek = self.peek()
                if peek.typ is T.KEYWORD and peek.val in allow_else:
                    # {{if a}}x{{else if b}}y{{end}} is {{if a}}x{{else}}{{if b}}y{{end}}{{end}}.
                    self.next()
                    else_body = n.ListNode(nxt.pos)
                    else_body.nodes.append(self.branch(peek.val, allow_else))
                else:
                    else_body, end = self.item_list()
                    if not isinstance(end, _End):
                        raise self.errorf(f"expected end; found {end}")
        finally:
            del self.vars[mark:]
        return n.BranchNode(
            pipe.pos, kind=kind, line=pipe.line, pipe=pipe, body=body, else_body=else_body
        )

    def template_control(self) -> n.Node:
        context = "template clause"
        item = self.next_non_space()
        name = self.template_name(item, context)
        pipe: n.PipeNode | None = None
        if self.next_non_space().typ is not T.RIGHT_DELIM:
            self.backup()
            pipe = self.pipeline(context, T.RIGHT_DELIM)
        return n.TemplateNode(item.pos, line=item.line, name=name, pipe=pipe)

    def block_control(self) -> n.Node:
        context = "block clause"
        item = self.next_non_space()
        name = self.template_name(item, context)
        pipe = self.pipeline(context, T.RIGHT_DELIM)
        self.definition_body(name, context)
        return n.TemplateNode(item.pos, line=item.line, name=name, pipe=pipe)

    def template_name(self, item: Item, context: str) -> str:
        if item.typ in (T.STRING, T.RAW_STRING):
            return self.unquote(item)
        raise self.unexpected(item, context)

    def unquote(self, item: Item) -> str:
        try:
            return unquote(item.val)
        except ValueError:
            raise self.errorf("invalid syntax") from None

    # -- pipelines -----------------------------------------------------------
    def pipeline(self, context: str, end: T) -> n.PipeNode:
        token = self.peek_non_space()
        pipe = n.PipeNode(token.pos, line=token.line)
        while True:  # the "decls" loop of Go's parser
            v = self.peek_non_space()
            if v.typ is not T.VARIABLE:
                break
            start = self.i
            self.next_non_space()
            after = self.peek()
            nxt = self.peek_non_space()
            if nxt.typ in (T.ASSIGN, T.DECLARE):
                pipe.is_assign = nxt.typ is T.ASSIGN
                self.next_non_space()
                pipe.decl.append(n.VariableNode(v.pos, ident=v.val.split(".")))
                self.vars.append(v.val)
                break
            if nxt.typ is T.CHAR and nxt.val == ",":
                self.next_non_space()
                pipe.decl.append(n.VariableNode(v.pos, ident=v.val.split(".")))
                self.vars.append(v.val)
                if context == "range" and len(pipe.decl) < 2:
                    if self.peek_non_space().typ in (T.VARIABLE, T.RIGHT_DELIM, T.RIGHT_PAREN):
                        continue
                    raise self.errorf("range can only initialize variables")
                raise self.errorf(f"too many declarations in {context}")
            del after
            self.i = start
            break
        while True:
            item = self.next_non_space()
            if item.typ is end:
                self.check_pipeline(pipe, context)
                return pipe
            if item.typ in _OPERAND_START or self.is_keyword(item, "nil"):
                self.backup()
                pipe.cmds.append(self.command())
            else:
                raise self.unexpected(item, context)

    def check_pipeline(self, pipe: n.PipeNode, context: str) -> None:
        if not pipe.cmds:
            raise self.errorf(f"missing value for {context}")
        for i, cmd in enumerate(pipe.cmds[1:]):
            first = cmd.args[0]
            if isinstance(first, n.BoolNode | n.DotNode | n.NilNode | n.NumberNode | n.StringNode):
                raise self.errorf(f"non executable command in pipeline stage {i + 2}")

    def command(self) -> n.CommandNode:
        cmd = n.CommandNode(self.peek_non_space().pos)
        while True:
            self.peek_non_space()
            operand = self.operand()
            if operand is not None:
                cmd.args.append(operand)
            item = self.next()
            if item.typ is T.SPACE:
                continue
            if item.typ in (T.RIGHT_DELIM, T.RIGHT_PAREN):
                self.backup()
            elif item.typ is not T.PIPE:
                raise self.unexpected(item, "operand")
            break
        if not cmd.args:
            raise self.errorf("empty command")
        return cmd

    def operand(self) -> n.Node | None:
        node = self.term()
        if node is None:
            return None
        if self.peek().typ is T.FIELD:
            pos = self.peek().pos
            fields: list[str] = []
            while self.peek().typ is T.FIELD:
                fields.extend(self.next().val[1:].split("."))
            if isinstance(node, n.FieldNode):
                return n.FieldNode(pos, ident=[*node.ident, *fields])
            if isinstance(node, n.VariableNode):
                return n.VariableNode(pos, ident=[*node.ident, *fields])
            if isinstance(node, n.BoolNode | n.StringNode | n.NumberNode | n.NilNode | n.DotNode):
                raise self.errorf(f"unexpected . after term {_q(str(node))}")
            return n.ChainNode(pos, node=node, fields=fields)
        return node

    def term(self) -> n.Node | None:
        item = self.next_non_space()
        if item.typ is T.IDENTIFIER:
            if item.val not in self.funcs:
                raise self.errorf(f"function {_q(item.val)} not defined")
            return n.IdentifierNode(item.pos, ident=item.val)
        if item.typ is T.DOT:
            return n.DotNode(item.pos)
        if self.is_keyword(item, "nil"):
            return n.NilNode(item.pos)
        if item.typ is T.VARIABLE:
            if item.val not in self.vars:
                raise self.errorf(f"undefined variable {_q(item.val)}")
            return n.VariableNode(item.pos, ident=item.val.split("."))
        if item.typ is T.FIELD:
            return n.FieldNode(item.pos, ident=item.val[1:].split("."))
        if item.typ is T.BOOL:
            return n.BoolNode(item.pos, value=item.val == "true")
        if item.typ in (T.CHAR_CONSTANT, T.NUMBER):
            try:
                return parse_number(item.val, item.pos, item.typ is T.CHAR_CONSTANT)
            except ValueError as err:
                raise self.errorf(str(err)) from None
        if item.typ is T.LEFT_PAREN:
            return self.pipeline("parenthesized pipeline", T.RIGHT_PAREN)
        if item.typ in (T.STRING, T.RAW_STRING):
            return n.StringNode(item.pos, quoted=item.val, text=self.unquote(item))
        self.backup()
        return None


class _End(n.Node):
    def __str__(self) -> str:
        return "{{end}}"


class _Else(n.Node):
    def __init__(self, pos: int, line: int) -> None:
        super().__init__(pos)
        self.line = line

    def __str__(self) -> str:
        return "{{else}}"


def is_empty(node: n.Node | None) -> bool:
    if node is None or isinstance(node, n.CommentNode):
        return True
    if isinstance(node, n.ListNode):
        return all(is_empty(x) for x in node.nodes)
    if isinstance(node, n.TextNode):
        return node.text.strip() == ""
    return False


def parse(name: str, text: str, left: str, right: str, funcs: set[str]) -> dict[str, n.Tree]:
    return Parser(name, text, left, right, funcs).parse()
