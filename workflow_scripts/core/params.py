"""One calling convention for every stage: input and output files as flags, settings as one ``--params`` JSON
object validated into the stage's ``Params`` dataclass (unknown keys, missing keys and wrong types are errors that
name the key)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing
from typing import Any, TypeVar

P = TypeVar("P")


class ParamsError(ValueError):
    pass


def _type_ok(value: Any, annotation: Any) -> bool:
    if annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if origin is typing.Literal:
        return value in typing.get_args(annotation)
    if origin in (list, tuple):
        args = typing.get_args(annotation)
        return isinstance(value, list) and (not args or all(_type_ok(v, args[0]) for v in value))
    if origin is dict:
        args = typing.get_args(annotation)
        return isinstance(value, dict) and (not args or all(_type_ok(v, args[1]) for v in value.values()))
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    return True


def parse_params(cls: type[P], value: str | dict[str, Any], *, source: str = "--params") -> P:
    """``cls`` (a dataclass) from a JSON object; every key checked against the dataclass's fields and types."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ParamsError(f"{source}: not JSON: {e}") from e
    if not isinstance(value, dict):
        raise ParamsError(f"{source}: expected a JSON object, got {type(value).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise ParamsError(f"{source}: unknown key(s) {unknown} for {cls.__name__} (known: {sorted(fields)})")
    for name, field in fields.items():
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        if name not in value:
            if required:
                raise ParamsError(f"{source}: missing key {name!r} for {cls.__name__}")
            continue
        if not _type_ok(value[name], hints[name]):
            raise ParamsError(f"{source}: key {name!r} is {value[name]!r}, expected {hints[name]}")
    return cls(**value)


def stage_parser(module_doc: str | None, prog: str, params_cls: type) -> argparse.ArgumentParser:
    """The stage CLI's parser, with ``--params`` (a JSON object of ``params_cls``) already added."""
    doc = (module_doc or prog).strip()
    parser = argparse.ArgumentParser(prog=f"python -m {prog}", description=doc.splitlines()[0],
                                     epilog=f"--params keys: {', '.join(f.name for f in dataclasses.fields(params_cls))}")
    parser.add_argument("--params", required=True, help=f"the stage's settings as one JSON object ({params_cls.__name__})")
    return parser


def parse_stage_args(parser: argparse.ArgumentParser, params_cls: type[P], argv: list[str] | None
                     ) -> tuple[argparse.Namespace, P]:
    args = parser.parse_args(argv)
    try:
        return args, parse_params(params_cls, args.params)
    except ParamsError as e:
        parser.error(str(e))
        raise  # unreachable: parser.error exits
