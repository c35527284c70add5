"""The workflow configuration's errors, each on one line naming the file, the line and the key.

rules/common.smk calls these before Snakemake's own loading and validation, whose messages name neither the
file nor the line of a YAML syntax error and print the whole sub-schema (~100 lines) of a schema error. PyYAML and
jsonschema are imported where they are used: core/ imports only the standard library at module level.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message is one line naming the file (and line)."""


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Snakemake's merge of several --configfile values: nested mappings merged key by key, later files win."""
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load(paths: Sequence[Path | str]) -> dict[str, Any]:
    """Configuration files read and merged as Snakemake merges them (no schema defaults filled in)."""
    import yaml

    config: dict[str, Any] = {}
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"configuration file {display_name(path)} does not exist")
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"configuration file {display_name(path)} is not a mapping")
        config = merge(config, data)
    return config


def results_dir(config: dict[str, Any]) -> str:
    """The configuration's results folder (the schema's default, ``results``, when it names none)."""
    return str(config.get("results_dir") or "results")


def store_dir(config: dict[str, Any]) -> str:
    """The configuration's store: ``store``, else ``<results_dir>/.store`` (inside its results folder)."""
    return str(config.get("store") or f"{results_dir(config)}/.store")


def display_name(path: Path | str) -> str:
    """A configuration file as the user named it: relative to the working directory when it lies below it."""
    absolute = Path(os.path.abspath(path))
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


def check_yaml_syntax(path: Path | str) -> None:
    """Raise ConfigError naming the file, line and column of a YAML syntax error, or of a key written twice in one
    mapping (YAML keeps the last silently: a model listed twice would vanish). Nothing if the file is sound."""
    import yaml

    try:
        root = yaml.compose(Path(path).read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except UnicodeDecodeError as error:
        raise ConfigError(f"{display_name(path)}: not UTF-8 text (byte {error.start})") from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = error.problem or error.context or "not YAML"
        context = error.context_mark
        if error.problem and error.context and context and context.line != mark.line:
            # Where the parser noticed is often after the mistake: say where the unfinished construct began.
            problem += f" ({error.context} that began at line {context.line + 1}, column {context.column + 1})"
        raise ConfigError(f"{display_name(path)}{where}: YAML syntax error: {problem}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{display_name(path)}: YAML syntax error: {error}") from None
    pending = [root] if root is not None else []
    while pending:
        node = pending.pop()
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    line = key.start_mark.line + 1
                    if key.value in first:
                        raise ConfigError(f"{display_name(path)}, line {line}: key {key.value!r} is written twice in "
                                          f"one mapping (first at line {first[key.value]}); YAML would keep only "
                                          "the last")
                    first[key.value] = line
                pending.append(value)
        elif isinstance(node, yaml.SequenceNode):
            pending.extend(node.value)


_MISSING = object()


def _value_at(data: Any, keys: Sequence[str | int]) -> Any:
    for key in keys:
        if isinstance(data, dict) and key in data:
            data = data[key]
        elif isinstance(data, list) and isinstance(key, int) and key < len(data):
            data = data[key]
        else:
            return _MISSING
    return data


def _line_of(path: Path, keys: Sequence[str | int]) -> int | None:
    """The 1-based line where ``keys`` (a path of mapping keys and list indices) is written in a YAML file."""
    import yaml

    try:
        node = yaml.compose(Path(path).read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    line = None
    for key in keys:
        if isinstance(node, yaml.MappingNode):
            match = [(k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == str(key)]
            if not match:
                return None
            line, node = match[-1][0].start_mark.line + 1, match[-1][1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            return None
    return line


def location(sources: Sequence[Path | str], keys: Sequence[str | int], value: Any = _MISSING) -> str:
    """Where the configuration sets ``keys``: "file, line N" for the last file that writes it (later files override
    earlier ones) with ``value`` when given, else the files, noting that the value is not written in them."""
    import yaml

    for source in reversed(sources):
        line = _line_of(Path(source), keys) if keys else None
        if line is None:
            continue
        if value is not _MISSING:
            written = _value_at(yaml.safe_load(Path(source).read_text(encoding="utf-8")), keys)
            if written != value:
                continue  # overridden (by --config, or a later file)
        return f"{display_name(source)}, line {line}"
    files = " + ".join(display_name(source) for source in sources) or "the configuration"
    return f"{files} (not written there: a --config value?)" if keys and sources else files


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class _Violation:
    path: list[str | int]  # where the schema is violated, shown as a.b.c
    expected: str  # what the schema wanted there
    keys: list[str | int]  # the key path to point at in the file


def _expected(error: Any) -> _Violation:
    """What the schema wanted at the error's place, and the key path to point at in the file."""
    keys: list[str | int] = list(error.absolute_path)
    schema, instance = error.schema, error.instance
    kind = error.validator
    if kind in ("oneOf", "anyOf") and error.context:
        return _expected_of_one_kind(error)
    if kind == "additionalProperties" and isinstance(instance, dict):
        allowed = sorted(schema.get("properties", {}))
        unexpected = sorted(str(k) for k in instance if k not in allowed)
        key = unexpected[0] if unexpected else ""
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return _Violation(keys, f"unknown key {key!r}{hint}; allowed: {', '.join(allowed)}", [*keys, key])
    if kind == "required":
        return _Violation(keys, f"missing key {_missing_key(error) or error.message!r}", keys)
    if kind == "type":
        wanted = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        return _Violation(keys, f"expected {' or '.join(map(str, wanted))}, got {_short(instance)}", keys)
    if kind == "enum":
        return _Violation(keys, f"expected one of {', '.join(map(str, error.validator_value))}; got {_short(instance)}",
                          keys)
    return _Violation(keys, error.message if len(error.message) <= 160 else error.message[:157] + "...", keys)


def _expected_of_one_kind(error: Any) -> _Violation:
    """A oneOf of alternatives told apart by one key's ``const`` (a model entry's ``kind``: one $defs entry per
    kind). jsonschema reports the oneOf itself ("... is not valid under any of the given schemas") and best_match
    cannot tell which alternative was meant: it is the one whose const the entry's value matches, and its own
    error is the one to report. Without a match, the key's value is wrong: the consts are what was expected."""
    import jsonschema

    keys: list[str | int] = list(error.absolute_path)
    branches: dict[Any, list[Any]] = {}
    for sub in error.context:
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    tags = {branch: sub for branch, subs in branches.items() for sub in subs
            if sub.validator == "const" and len(sub.relative_path) == 1}
    missing_everywhere = set.intersection(*({_missing_key(sub) for sub in subs} for subs in branches.values()))
    missing_everywhere.discard(None)
    if isinstance(error.instance, dict) and missing_everywhere:
        return _Violation(keys, f"missing key {sorted(missing_everywhere)[0]!r}", keys)
    if not isinstance(error.instance, dict) or not tags:
        return _expected(jsonschema.exceptions.best_match(error.context))
    tag = next(iter(tags.values())).relative_path[0]
    meant = [branch for branch in branches if branch not in tags]
    if len(meant) == 1:
        return _expected(jsonschema.exceptions.best_match(branches[meant[0]]))
    wanted = ", ".join(str(tags[branch].validator_value) for branch in sorted(tags))
    return _Violation([*keys, tag], f"expected one of {wanted}; got {_short(error.instance.get(tag))}", [*keys, tag])


def _missing_key(error: Any) -> str | None:
    if error.validator == "required" and error.message.count("'") >= 2:
        return error.message.split("'")[1]
    return None


def schema_error(config: dict[str, Any], schema_file: Path | str, sources: Sequence[Path | str]) -> str | None:
    """One line for the configuration's most relevant schema violation (None if it is valid): where it is written
    ("config.yaml, line 12"), the key path, what was expected; plus how many other violations there are."""
    import jsonschema
    import yaml

    schema = yaml.safe_load(Path(schema_file).read_text(encoding="utf-8"))
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = list(validator.iter_errors(config))
    if not errors:
        return None
    best = jsonschema.exceptions.best_match(errors)
    while best.parent is not None:  # best_match may descend into one alternative of a oneOf: judge the oneOf itself
        best = best.parent
    violation = _expected(best)
    path = ".".join(str(k) for k in violation.path) or "(top level)"
    others = len(errors) - 1
    more = f" (and {others} more error{'s' if others > 1 else ''})" if others else ""
    value = _value_at(config, violation.keys)
    if isinstance(value, (dict, list)):
        value = _MISSING  # a whole block: --config may have added to it; its place in the file is what helps
    return (f"{location(sources, violation.keys, value)}: {path}: {violation.expected}{more} "
            f"[schema: {display_name(schema_file)}]")
