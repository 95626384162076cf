"""A flag's value, read by the flag's declared type: from text (`--set`, XLA_FLAGS:
`parse_assignment`, `parse_value`) and from a config's JSON (`value_from_json`, in the domain
`expected_json` states). One reading per `FlagType` (`_READINGS`) says all three.

No value is coerced from another JSON type ("false" is no bool), and a JSON value must lie in
the flag's declared domain: XLA checks names, not values, and a value outside the domain can
abort or hang the process that compiles.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from execution.flags.allowlist import FUSION_TYPE_NAME, check_name
from execution.flags.flag_table import FlagError, FlagSpec, FlagValue, spec_of
from vocabulary.flags import FlagType

MAX_LIST_ITEMS = 32  # a library list longer than this is no config XLA was ever tuned with


def parse_assignment(text: str) -> tuple[str, FlagValue]:
    """Parse `name=value` as given to `--set`."""
    name, sep, raw = text.partition("=")
    name = name.strip().lstrip("-")
    if not sep or not name:
        raise FlagError(f"--set {text!r}: expected name=value")
    return name, parse_value(name, raw)


def parse_value(name: str, raw: str) -> FlagValue:
    """Parse a flag's textual value by the flag's declared type (string if undeclared)."""
    check_name(name)
    spec = spec_of(name)
    raw = raw.strip()
    if spec is None:
        return _guess_type(raw)
    return _READINGS[spec.type].parse(spec, name, raw)


def _guess_type(raw: str) -> FlagValue:
    """An undeclared flag's value: XLA's override parser wants bools and numbers typed."""
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw


def _enum_name(spec: FlagSpec, raw: str) -> str:
    short = raw.strip().upper()
    if spec.enum_prefix and short.startswith(spec.enum_prefix):
        short = short[len(spec.enum_prefix):]
    if spec.choices and short not in spec.choices:
        raise FlagError(f"{spec.name}: {raw!r} is not one of {', '.join(spec.choices)}")
    if not spec.choices and not FUSION_TYPE_NAME.fullmatch(short):
        raise FlagError(f"{spec.name}: {raw!r} is not an enum name")
    return short


def expected_json(spec: FlagSpec) -> str:
    """What a config's JSON form must give a flag of `spec`, in words: the JSON type of its
    kind and its declared domain (`choices`: the values a search may set)."""
    return _READINGS[spec.type].expected(spec)


def value_from_json(name: str, spec: FlagSpec, value: object) -> FlagValue:
    """Flag `name`'s value from its JSON form, if it is of the JSON type and in the domain that
    `expected_json` says; FlagError `NAME: VALUE is not EXPECTED` otherwise. XLA checks names,
    not values: a tiling factor of 0 aborts the process that compiles, a split count of 1e8
    hangs it."""
    try:
        read = _READINGS[spec.type].from_json(spec, name, value)
    except FlagError:
        read = None  # said below, with what the flag takes
    if read is None:
        raise FlagError(f"{name}: {_shown(value)} is not {expected_json(spec)}")
    return read


@dataclass(frozen=True)
class _Reading:
    """How the values of one flag type are read: from text (`--set`, XLA_FLAGS; `parse`, of a
    stripped text), from a config's JSON (`from_json`: None where the JSON value is not of the
    type's form or domain), and what that form and domain are, in words (`expected`)."""

    parse: Callable[[FlagSpec, str, str], FlagValue]
    from_json: Callable[[FlagSpec, str, object], FlagValue | None]
    expected: Callable[[FlagSpec], str]


def _parse_bool(spec: FlagSpec, name: str, raw: str) -> bool:
    lowered = raw.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise FlagError(f"{name}: {raw!r} is not a bool (true/false)")


def _parse_number(cast: Callable[[str], int | float], what: str) -> Callable[[FlagSpec, str, str], FlagValue]:
    def parse(spec: FlagSpec, name: str, raw: str) -> FlagValue:
        try:
            return cast(raw)
        except ValueError:
            raise FlagError(f"{name}: {raw!r} is not {what}") from None
    return parse


def _parse_backend(spec: FlagSpec, name: str, raw: str) -> str:
    if raw.lower() not in spec.choices:
        raise FlagError(f"{name}: {raw!r} is not a backend ({', '.join(spec.choices)})")
    return raw.lower()


def _parse_list(spec: FlagSpec, name: str, raw: str) -> tuple[str, ...]:
    # An empty value is meaningful: it clears the list (e.g. no library fusions at all).
    return tuple(_enum_name(spec, item) for item in raw.split(",") if item.strip())


def _text_from_json(spec: FlagSpec, name: str, value: object) -> FlagValue | None:
    """A JSON string read as the flag's text is (an enum name, a backend)."""
    return _READINGS[spec.type].parse(spec, name, value.strip()) if isinstance(value, str) else None


def _list_from_json(spec: FlagSpec, name: str, value: object) -> FlagValue | None:
    if (isinstance(value, list) and len(value) <= MAX_LIST_ITEMS
            and all(isinstance(item, str) for item in value)):
        return tuple(_enum_name(spec, item) for item in value)
    return None


def _names(spec: FlagSpec) -> str:
    return (f"one of {', '.join(spec.choices)}" if spec.choices
            else 'fusion type names such as "REDUCE" or "INDIVIDUAL_DOT"')


def _no_domain(json_type: str) -> Callable[[FlagSpec], str]:
    # float and string: no flag of these kinds declares a domain, so no config may set one.
    return lambda spec: f"settable: a {spec.type} flag (a JSON {json_type}) has no declared domain"


_READINGS: dict[FlagType, _Reading] = {
    FlagType.BOOL: _Reading(_parse_bool, lambda spec, name, value: value if isinstance(value, bool) else None,
                            lambda spec: "a JSON boolean (true or false)"),
    FlagType.INT: _Reading(
        _parse_number(int, "an integer"),
        lambda spec, name, value: value if type(value) is int and (
            not spec.choices or str(value) in spec.choices) else None,
        lambda spec: (f"a JSON integer in its domain ({', '.join(spec.choices)})" if spec.choices
                      else "a JSON integer")),
    FlagType.FLOAT: _Reading(_parse_number(float, "a number"), lambda spec, name, value: None,
                             _no_domain("number")),
    FlagType.ENUM: _Reading(lambda spec, name, raw: _enum_name(spec, raw), _text_from_json,
                            lambda spec: f"a JSON string, {_names(spec)}"),
    FlagType.REPEATED_ENUM: _Reading(
        _parse_list, _list_from_json,
        lambda spec: f"a JSON list of at most {MAX_LIST_ITEMS} enum values ({_names(spec)}); write [] for none"),
    FlagType.STRING: _Reading(lambda spec, name, raw: raw, lambda spec, name, value: None, _no_domain("string")),
    FlagType.PLACEMENT: _Reading(_parse_backend, _text_from_json,
                                 lambda spec: f"a JSON string naming a backend ({', '.join(spec.choices)})"),
}


def _shown(value: object) -> str:
    """A value as its config's JSON wrote it, cut short: a message names it, never quotes a file."""
    text = json.dumps(value, default=repr)
    return text if len(text) <= 80 else text[:77] + "..."
