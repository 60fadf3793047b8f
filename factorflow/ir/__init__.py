"""The statement IR (Infer.NET's MSL in Python terms), its printer and verifier."""

from factorflow.ir.check import IRError, check
from factorflow.ir.nodes import (
    Const,
    For,
    If,
    Node,
    Operand,
    Program,
    Ref,
    Stmt,
    VarDecl,
    While,
    framed,
    nest,
    refs_in,
    walk,
)
from factorflow.ir.printer import format_program, format_stmt

__all__ = ["Const", "For", "If", "Node", "Operand", "Program", "Ref", "Stmt", "VarDecl",
           "While", "walk", "framed", "nest", "refs_in", "check", "IRError", "format_program",
           "format_stmt"]
