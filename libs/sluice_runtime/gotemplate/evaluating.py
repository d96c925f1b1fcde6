"""Evaluating pipelines: commands, fields, variables, function calls and argument checks.

The part of Go's text/template exec that turns a pipeline into a value, with
Go's error texts; walking the tree (executing.py) builds on it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from sluice_runtime.gotemplate import budgets
from sluice_runtime.gotemplate import nodes as n
from sluice_runtime.gotemplate.errors import ExecError, FuncError
from sluice_runtime.gotemplate.formatting import go_quote
from sluice_runtime.gotemplate.functions import ANY, VALUE, GoFunc
from sluice_runtime.gotemplate.values import NO_VALUE, Boxed, StrMap, is_true, type_name, unbox

T = TypeVar("T")
MISSING: Any = object()  # Go's missingVal: no piped-in final argument


# A constant passed for a typed parameter: which nodes fit, Go's word for the type, the value.
TYPED_CONSTANTS: dict[str, tuple[Any, str, Callable[[Any], Any]]] = {
    "bool": (n.BoolNode, "bool", lambda x: x.value),
    "string": (n.StringNode, "string", lambda x: x.text),
    "int": (n.NumberNode, "integer", lambda x: x.int_value if x.is_int else None),
    "int64": (n.NumberNode, "integer", lambda x: x.int_value if x.is_int else None),
    "float64": (n.NumberNode, "float", lambda x: x.float_value if x.is_float else None),
}


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


def can_be_nil(typ: str) -> bool:
    return typ in (ANY, VALUE) or typ.startswith(("[]", "map[", "func"))


def zero(typ: str) -> Any:
    if typ.startswith("[]"):
        return []
    if typ.startswith("map["):
        return {}
    return None


class Evaluator:
    def __init__(
        self,
        trees: dict[str, n.Tree],
        funcs: dict[str, GoFunc],
        *,
        missing_key_error: bool,
        budget: budgets.Budget | None = None,
    ) -> None:
        self.budget = budget or budgets.Budget()
        self.trees = trees
        self.funcs = funcs
        self.missing_key_error = missing_key_error
        self.out: list[str] = []
        self.vars: list[list[Any]] = []
        self.node: n.Node | None = None
        self.tree: n.Tree | None = None

    # -- errors ------------------------------------------------------------------
    def at(self, node: n.Node) -> None:
        self.node = node

    def errorf(self, message: str) -> NoReturn:
        assert self.tree is not None
        name = go_quote(self.tree.name)
        if self.node is None:
            raise ExecError(f"template: {self.tree.name}: {message}")
        prefix = self.tree.text[: self.node.pos]
        line = 1 + prefix.count("\n")
        col = len(prefix[prefix.rfind("\n") + 1 :].encode())
        location = f"{self.tree.parse_name}:{line}:{col}"
        raise ExecError(f"template: {location}: executing {name} at <{self.node}>: {message}")

    # -- the budget ----------------------------------------------------------------
    def step(self, node: n.Node, count: int = 1) -> None:
        try:
            self.budget.step(count)
        except budgets.BudgetExceeded as error:
            self.at(node)
            self.errorf(str(error))

    def spend(self, size: int) -> None:
        try:
            self.budget.spend(size)
        except budgets.BudgetExceeded as error:
            self.errorf(str(error))

    def guarded(self, make: Callable[[], T]) -> T:
        """`make()`, a budget it runs over reported where the template is."""
        try:
            return make()
        except budgets.BudgetExceeded as error:
            self.errorf(str(error))

    # -- variables -----------------------------------------------------------------
    def var_value(self, name: str) -> Any:
        for entry in reversed(self.vars):
            if entry[0] == name:
                return entry[1]
        self.errorf(f"undefined variable: {name}")

    def set_var(self, name: str, value: Any) -> None:
        for entry in reversed(self.vars):
            if entry[0] == name:
                entry[1] = value
                return
        self.errorf(f"undefined variable: {name}")

    # -- walking ---------------------------------------------------------------------
    def eval_pipeline(self, dot: Any, pipe: n.PipeNode) -> Any:
        self.at(pipe)
        value = MISSING
        for cmd in pipe.cmds:
            value = self.eval_command(dot, cmd, value)
            # Go unwraps an interface{} after each command; a nil one becomes "no value".
            if isinstance(value, Boxed):
                value = NO_VALUE if value.value is None else value.value
        for var in pipe.decl:
            if pipe.is_assign:
                self.set_var(var.ident[0], value)
            else:
                self.vars.append([var.ident[0], value])
        return value

    def not_a_function(self, args: list[n.Node], final: Any) -> None:
        if len(args) > 1 or final is not MISSING:
            self.errorf(f"can't give argument to non-function {args[0]}")

    def eval_command(self, dot: Any, cmd: n.CommandNode, final: Any) -> Any:
        first = cmd.args[0]
        if isinstance(first, n.FieldNode):
            return self.eval_field_node(dot, first, cmd.args, final)
        if isinstance(first, n.ChainNode):
            return self.eval_chain_node(dot, first, cmd.args, final)
        if isinstance(first, n.IdentifierNode):
            return self.eval_function(dot, first, cmd, cmd.args, final)
        if isinstance(first, n.PipeNode):
            self.not_a_function(cmd.args, final)
            return self.eval_pipeline(dot, first)
        if isinstance(first, n.VariableNode):
            return self.eval_variable_node(dot, first, cmd.args, final)
        self.at(first)
        self.not_a_function(cmd.args, final)
        if isinstance(first, n.BoolNode):
            return first.value
        if isinstance(first, n.DotNode):
            return dot
        if isinstance(first, n.NilNode):
            self.errorf("nil is not a command")
        if isinstance(first, n.NumberNode):
            return self.ideal_constant(first)
        if isinstance(first, n.StringNode):
            return first.text
        self.errorf(f"can't evaluate command {go_quote(str(first))}")

    def ideal_constant(self, node: n.NumberNode) -> Any:
        self.at(node)
        text = node.text
        hex_int = len(text) > 2 and text[0] == "0" and text[1] in "xX" and not set(text) & set("pP")
        if node.is_float and not hex_int and not text.startswith("'") and set(text) & set(".eEpP"):
            return node.float_value
        if node.is_int:
            if not -(2**63) <= node.int_value < 2**63:
                self.errorf(f"{text} overflows int")
            return node.int_value
        self.errorf(f"{text} overflows int")

    def eval_field_node(
        self, dot: Any, field: n.FieldNode, args: list[n.Node] | None, final: Any
    ) -> Any:
        self.at(field)
        return self.eval_field_chain(dot, dot, field, field.ident, args, final)

    def eval_chain_node(
        self, dot: Any, chain: n.ChainNode, args: list[n.Node] | None, final: Any
    ) -> Any:
        self.at(chain)
        if isinstance(chain.node, n.NilNode):
            self.errorf(f"indirection through explicit nil in {chain}")
        assert chain.node is not None
        pipe = self.eval_arg(dot, None, chain.node)
        return self.eval_field_chain(dot, pipe, chain, chain.fields, args, final)

    def eval_variable_node(
        self, dot: Any, var: n.VariableNode, args: list[n.Node] | None, final: Any
    ) -> Any:
        self.at(var)
        value = self.var_value(var.ident[0])
        if len(var.ident) == 1:
            self.not_a_function(args or [var], final)
            return value
        return self.eval_field_chain(dot, value, var, var.ident[1:], args, final)

    def eval_field_chain(
        self,
        dot: Any,
        receiver: Any,
        node: n.Node,
        ident: list[str],
        args: list[n.Node] | None,
        final: Any,
    ) -> Any:
        for name in ident[:-1]:
            receiver = self.eval_field(name, None, MISSING, receiver)
        return self.eval_field(ident[-1], args, final, receiver)

    def eval_field(self, name: str, args: list[n.Node] | None, final: Any, receiver: Any) -> Any:
        if receiver is NO_VALUE:
            if self.missing_key_error:
                self.errorf(f"nil data; no entry for key {go_quote(name)}")
            return NO_VALUE
        typ = type_name(receiver)
        value = unbox(receiver)
        if value is None:
            self.errorf(f"nil pointer evaluating {typ}.{name}")
        if isinstance(value, dict):
            if (args is not None and len(args) > 1) or final is not MISSING:
                self.errorf(f"{name} is not a method but has arguments")
            if name in value:
                # A map[string]string's element is a string, not an interface{}.
                return value[name] if isinstance(value, StrMap) else Boxed(value[name])
            if self.missing_key_error:
                self.errorf(f"map has no entry for key {go_quote(name)}")
            return NO_VALUE
        self.errorf(f"can't evaluate field {name} in type {typ}")

    def eval_function(
        self, dot: Any, node: n.IdentifierNode, cmd: n.Node, args: list[n.Node] | None, final: Any
    ) -> Any:
        self.at(node)
        fn = self.funcs.get(node.ident)
        if fn is None:
            self.errorf(f"{go_quote(node.ident)} is not a defined function")
        return self.eval_call(dot, fn, cmd, node.ident, args, final)

    def eval_call(
        self, dot: Any, fn: GoFunc, node: n.Node, name: str, args: list[n.Node] | None, final: Any
    ) -> Any:
        args = args[1:] if args is not None else []
        num_in = len(args) + (final is not MISSING)
        num_fixed = len(args)
        if fn.variadic:
            num_fixed = len(fn.params) - 1
            if num_in < num_fixed:
                self.errorf(
                    f"wrong number of args for {name}: want at least {num_fixed} got {len(args)}"
                )
        elif num_in != len(fn.params):
            self.errorf(f"wrong number of args for {name}: want {len(fn.params)} got {num_in}")
        if fn.fn is None:  # and/or short-circuit, evaluating arguments lazily
            value: Any = NO_VALUE
            for arg in args:
                value = self.eval_arg(dot, VALUE, arg)
                if is_true(value)[0] == (name == "or"):
                    return value
            if final is not MISSING:
                value = self.validate_type(final, VALUE)
            return value
        argv: list[Any] = []
        for i, arg in enumerate(args):
            typ = fn.params[i] if i < num_fixed else fn.params[-1]
            argv.append(self.eval_arg(dot, typ, arg))
        if final is not MISSING:
            typ = fn.params[-1]
            if fn.variadic and num_in - 1 < num_fixed:
                typ = fn.params[num_in - 1]
            argv.append(self.validate_type(final, typ))
        self.step(node, 1 + budgets.read_cost(argv))
        try:
            result = fn.fn(*argv)
            self.budget.spend(budgets.size_of(result))
        except FuncError as err:
            self.at(node)
            self.errorf(f"error calling {name}: {err}")
        except ZeroDivisionError:
            self.at(node)
            self.errorf(f"error calling {name}: runtime error: integer divide by zero")
        except (ExecError, _Break, _Continue):
            raise
        except RecursionError:
            raise
        except Exception as err:  # a panic in Go: call turns it into an error too
            self.at(node)
            self.errorf(f"error calling {name}: {err}")
        return Boxed(result) if fn.boxed_result else result

    def validate_type(self, value: Any, typ: str | None) -> Any:
        if typ is None:
            return value
        if value is NO_VALUE:
            if can_be_nil(typ):
                return zero(typ) if typ not in (ANY, VALUE) else (None if typ == ANY else value)
            self.errorf(f"invalid value; expected {typ}")
        if typ == VALUE:
            return value
        if typ == ANY:
            return unbox(value)
        if isinstance(value, Boxed):
            if value.value is None:
                self.errorf(f"wrong type for value; expected {typ}; got interface {{}}")
            value = value.value
        if type_name(value) == typ:
            return value
        self.errorf(f"wrong type for value; expected {typ}; got {type_name(value)}")

    def eval_arg(self, dot: Any, typ: str | None, node: n.Node) -> Any:
        self.at(node)
        if isinstance(node, n.DotNode):
            return self.validate_type(dot, typ)
        if isinstance(node, n.NilNode):
            if typ is None or can_be_nil(typ):
                # A reflect.Value parameter (the builtins') gets the zero Value, Go's "no value".
                return NO_VALUE if typ == VALUE else None if typ in (None, ANY) else zero(typ)
            self.errorf(f"cannot assign nil to {typ}")
        if isinstance(node, n.FieldNode):
            return self.validate_type(self.eval_field_node(dot, node, [node], MISSING), typ)
        if isinstance(node, n.VariableNode):
            return self.validate_type(self.eval_variable_node(dot, node, None, MISSING), typ)
        if isinstance(node, n.PipeNode):
            return self.validate_type(self.eval_pipeline(dot, node), typ)
        if isinstance(node, n.IdentifierNode):
            return self.validate_type(self.eval_function(dot, node, node, None, MISSING), typ)
        if isinstance(node, n.ChainNode):
            return self.validate_type(self.eval_chain_node(dot, node, None, MISSING), typ)
        if typ in (None, ANY, VALUE):
            if isinstance(node, n.NumberNode):
                return self.ideal_constant(node)
            if isinstance(node, n.BoolNode | n.StringNode):
                return node.value if isinstance(node, n.BoolNode) else node.text
        elif typ in TYPED_CONSTANTS:
            kinds, want, value = TYPED_CONSTANTS[typ]
            if isinstance(node, kinds) and value(node) is not None:
                return value(node)
            self.errorf(f"expected {want}; found {node}")
        self.errorf(f"can't handle {node} for arg of type {typ}")
