"""The base of every payload record: frozen, keyword-only msgspec Structs.

``to_value()`` turns a record into plain JSON-compatible builtins (ids become
strings, enums their values); ``T.from_value(v)`` is the inverse and raises
:class:`PayloadError` naming the offending path when ``v`` does not fit.
"""

from __future__ import annotations

from typing import Any, Self

import msgspec

from .._errors import PayloadError
from ._ids import dec_hook, enc_hook


class Record(msgspec.Struct, frozen=True, kw_only=True):
    """A frozen payload record with ``to_value()`` / ``from_value()``."""

    def to_value(self) -> Any:
        """Plain builtins (dict/list/str/int/float/bool/None) for this record."""
        return msgspec.to_builtins(self, enc_hook=enc_hook)

    @classmethod
    def from_value(cls, value: Any) -> Self:
        """Decode ``value`` (as produced by ``to_value``) into this type.

        Raises :class:`PayloadError` with the failing path when it does not fit.
        """
        try:
            return msgspec.convert(value, cls, dec_hook=dec_hook)
        except msgspec.ValidationError as error:
            raise PayloadError(
                f"value does not decode into {cls.__name__}: {error}",
                type=cls.__name__,
                detail=str(error),
            ) from error
