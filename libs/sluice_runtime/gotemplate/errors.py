"""The errors of template parsing and execution, worded as Go words them."""

from __future__ import annotations


class TemplateError(Exception):
    """A template that cannot be parsed or executed.

    The message is Go's: ``template: NAME:LINE: ...`` for parse errors and
    ``template: NAME:LINE:COL: executing "NAME" at <NODE>: ...`` for
    execution errors, so a condition can show it as users of Flux see it.
    """


class ParseError(TemplateError):
    pass


class ExecError(TemplateError):
    pass


class FuncError(Exception):
    """Raised by a template function; the evaluator wraps it as ``error calling NAME: ...``."""
