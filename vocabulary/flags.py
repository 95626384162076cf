"""What kind of value a compiler flag takes (`FlagType`) and how it reaches XLA (`Channel`): the
closed sets of `execution.flags.FlagSpec`, which the tuner's spaces and the store's checks read."""

from __future__ import annotations

from vocabulary.closed_set import ClosedSet


class FlagType(ClosedSet):
    """A flag's value type. REPEATED_ENUM: a list of enum names; PLACEMENT: the backend one
    fusion type is routed to (library routing: `execution.flags.placement`). Earlier versions
    spelled REPEATED_ENUM "repeated_enum"; it reads."""

    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    ENUM = "enum"
    REPEATED_ENUM = "repeated enum"
    STRING = "string"
    PLACEMENT = "placement"


class Channel(ClosedSet):
    """How a flag reaches XLA (`execution.flags.to_xla`): OPTION, a compile-option override of
    DebugOptions; BACKEND_EXTRA, an entry of DebugOptions' backend extra options map;
    PLACEMENT, a move that becomes the library routing lists; BUILD_OPTION, a field of the
    ExecutableBuildOptions. Earlier versions spelled the values of two words with an underscore
    ("backend_extra"); they read."""

    OPTION = "option"
    BACKEND_EXTRA = "backend extra"
    PLACEMENT = "placement"
    BUILD_OPTION = "build option"
