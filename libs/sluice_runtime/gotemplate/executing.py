"""Executing a parsed template: Go's walk over text, actions, if/with/range and template calls."""

from __future__ import annotations

from typing import Any

from sluice_runtime.gotemplate import nodes as n
from sluice_runtime.gotemplate.errors import ExecError
from sluice_runtime.gotemplate.evaluating import Evaluator, _Break, _Continue
from sluice_runtime.gotemplate.formatting import format_value, go_quote
from sluice_runtime.gotemplate.functions import GoFunc
from sluice_runtime.gotemplate.values import NO_VALUE, Boxed, is_true, type_name, unbox


class State(Evaluator):
    def execute(self, tree: n.Tree, data: Any) -> str:
        self.tree = tree
        self.vars = [["$", data]]
        try:
            self.walk(data, tree.root)
        except RecursionError:
            raise ExecError(
                f"template: {tree.name}: exceeded maximum template depth (100000)"
            ) from None
        return "".join(self.out)

    def write(self, text: str) -> None:
        self.spend(len(text))
        self.out.append(text)

    def walk(self, dot: Any, node: n.Node) -> None:
        self.step(node)
        if isinstance(node, n.ActionNode):
            assert node.pipe is not None
            value = self.eval_pipeline(dot, node.pipe)
            if not node.pipe.decl:
                self.at(node)
                if callable(value) and not isinstance(value, GoFunc):
                    self.errorf(f"can't print {node} of type {type_name(value)}")
                self.write(self.guarded(lambda: format_value(value)))
        elif isinstance(node, n.ListNode):
            for child in node.nodes:
                self.walk(dot, child)
        elif isinstance(node, n.TextNode):
            self.write(node.text)
        elif isinstance(node, n.BranchNode):
            if node.kind == "range":
                self.walk_range(dot, node)
            else:
                self.walk_if_or_with(dot, node)
        elif isinstance(node, n.TemplateNode):
            self.walk_template(dot, node)
        elif isinstance(node, n.BreakNode):
            raise _Break
        elif isinstance(node, n.ContinueNode):
            raise _Continue
        elif isinstance(node, n.CommentNode):
            pass
        else:  # pragma: no cover - the parser makes no other nodes
            self.errorf(f"unknown node: {node}")

    def walk_if_or_with(self, dot: Any, node: n.BranchNode) -> None:
        mark = len(self.vars)
        try:
            assert node.pipe is not None and node.body is not None
            value = self.eval_pipeline(dot, node.pipe)
            truth, ok = is_true(value)
            if not ok:
                self.errorf(f"if/with can't use {format_value(value)}")
            if truth:
                self.walk(value if node.kind == "with" else dot, node.body)
            elif node.else_body is not None:
                self.walk(dot, node.else_body)
        finally:
            del self.vars[mark:]

    def walk_range(self, dot: Any, node: n.BranchNode) -> None:
        self.at(node)
        outer = len(self.vars)
        try:
            assert node.pipe is not None and node.body is not None
            value = unbox(self.eval_pipeline(dot, node.pipe))
            mark = len(self.vars)
            pairs: list[tuple[Any, Any]] | range
            if isinstance(value, list | tuple):
                pairs = [(i, Boxed(v)) for i, v in enumerate(value)]
            elif isinstance(value, dict):
                pairs = [(k, Boxed(value[k])) for k in sorted(value)]
            elif isinstance(value, int) and not isinstance(value, bool):
                # Go 1.22 ranges over an integer with a single variable only.
                if len(node.pipe.decl) > 1:
                    self.errorf(f"can't use {value} to iterate over more than one variable")
                pairs = range(value)  # pairs made as the range goes, each a step
            elif value is NO_VALUE or value is None:
                pairs = []
            else:
                self.errorf(f"range can't iterate over {format_value(value)}")
            try:
                for pair in pairs:
                    self.step(node)
                    index, elem = (pair, pair) if isinstance(pair, int) else pair
                    self.range_iteration(node, mark, index, elem)
            except _Break:
                pass
            if not pairs and node.else_body is not None:
                self.walk(dot, node.else_body)
        finally:
            del self.vars[outer:]

    def range_iteration(self, node: n.BranchNode, mark: int, index: Any, elem: Any) -> None:
        assert node.pipe is not None and node.body is not None
        decl = node.pipe.decl
        if decl:
            if node.pipe.is_assign:
                self.set_var(decl[0].ident[0], index if len(decl) > 1 else elem)
            else:
                self.vars[-1][1] = elem
        if len(decl) > 1:
            if node.pipe.is_assign:
                self.set_var(decl[1].ident[0], elem)
            else:
                self.vars[-2][1] = index
        try:
            self.walk(elem, node.body)
        except _Continue:
            pass
        finally:
            del self.vars[mark:]

    def walk_template(self, dot: Any, node: n.TemplateNode) -> None:
        self.at(node)
        tree = self.trees.get(node.name)
        if tree is None:
            self.errorf(f"template {go_quote(node.name)} not defined")
        value = self.eval_pipeline(dot, node.pipe) if node.pipe is not None else NO_VALUE
        saved = (self.vars, self.tree)
        self.vars, self.tree = [["$", value]], tree
        try:
            self.walk(value, tree.root)
        finally:
            self.vars, self.tree = saved

    # -- evaluation ---------------------------------------------------------------------
