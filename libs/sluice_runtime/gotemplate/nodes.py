"""The parse tree, with Go's node kinds and their String() forms.

Execution errors quote the node they failed at (``at <.a.b>``) and give its
byte position, so every node keeps the position Go gives it and prints as Go
prints it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Node:
    pos: int

    def __str__(self) -> str:  # pragma: no cover - every node overrides
        return ""


@dataclass
class ListNode(Node):
    nodes: list[Node] = field(default_factory=list)

    def __str__(self) -> str:
        return "".join(str(n) for n in self.nodes)


@dataclass
class TextNode(Node):
    text: str = ""

    def __str__(self) -> str:
        from sluice_runtime.gotemplate.formatting import go_quote

        return go_quote(self.text)


@dataclass
class CommentNode(Node):
    text: str = ""

    def __str__(self) -> str:
        return "{{" + self.text + "}}"


@dataclass
class DotNode(Node):
    def __str__(self) -> str:
        return "."


@dataclass
class NilNode(Node):
    def __str__(self) -> str:
        return "nil"


@dataclass
class BoolNode(Node):
    value: bool = False

    def __str__(self) -> str:
        return "true" if self.value else "false"


@dataclass
class NumberNode(Node):
    text: str = ""
    is_int: bool = False
    is_float: bool = False
    int_value: int = 0
    float_value: float = 0.0

    def __str__(self) -> str:
        return self.text


@dataclass
class StringNode(Node):
    quoted: str = ""
    text: str = ""

    def __str__(self) -> str:
        return self.quoted


@dataclass
class FieldNode(Node):
    ident: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return "".join("." + i for i in self.ident)


@dataclass
class VariableNode(Node):
    ident: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return ".".join(self.ident)


@dataclass
class IdentifierNode(Node):
    ident: str = ""

    def __str__(self) -> str:
        return self.ident


@dataclass
class ChainNode(Node):
    node: Node | None = None
    fields: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        inner = f"({self.node})" if isinstance(self.node, PipeNode) else str(self.node)
        return inner + "".join("." + f for f in self.fields)


@dataclass
class CommandNode(Node):
    args: list[Node] = field(default_factory=list)

    def __str__(self) -> str:
        return " ".join(f"({a})" if isinstance(a, PipeNode) else str(a) for a in self.args)


@dataclass
class PipeNode(Node):
    line: int = 0
    is_assign: bool = False
    decl: list[VariableNode] = field(default_factory=list)
    cmds: list[CommandNode] = field(default_factory=list)

    def __str__(self) -> str:
        head = ", ".join(str(v) for v in self.decl) + " := " if self.decl else ""
        return head + " | ".join(str(c) for c in self.cmds)


@dataclass
class ActionNode(Node):
    line: int = 0
    pipe: PipeNode | None = None

    def __str__(self) -> str:
        return "{{" + str(self.pipe) + "}}"


@dataclass
class BranchNode(Node):
    """if, range and with: a pipeline, a list, and an optional else list."""

    kind: str = ""
    line: int = 0
    pipe: PipeNode | None = None
    body: ListNode | None = None
    else_body: ListNode | None = None

    def __str__(self) -> str:
        text = "{{" + self.kind + " " + str(self.pipe) + "}}" + str(self.body)
        if self.else_body is not None:
            text += "{{else}}" + str(self.else_body)
        return text + "{{end}}"


@dataclass
class BreakNode(Node):
    def __str__(self) -> str:
        return "{{break}}"


@dataclass
class ContinueNode(Node):
    def __str__(self) -> str:
        return "{{continue}}"


@dataclass
class TemplateNode(Node):
    line: int = 0
    name: str = ""
    pipe: PipeNode | None = None

    def __str__(self) -> str:
        from sluice_runtime.gotemplate.formatting import go_quote

        if self.pipe is None:
            return "{{template " + go_quote(self.name) + "}}"
        return "{{template " + go_quote(self.name) + " " + str(self.pipe) + "}}"


@dataclass
class Tree:
    """One named template: its body and the text its positions index."""

    name: str
    parse_name: str
    text: str
    root: ListNode
