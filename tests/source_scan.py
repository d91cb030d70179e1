"""What the structure tests read in the app's source."""

from __future__ import annotations

import ast


def docstring_ids(tree: ast.AST) -> set[int]:
    """The ``id`` of every docstring's constant in ``tree`` (module, class, function):
    text a person reads, not a name the code uses."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids
