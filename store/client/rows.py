"""The base of the rows the client returns (``Admin``'s, the dead-letter queue's)."""
from __future__ import annotations

from dataclasses import asdict
from typing import Any


class Row:
    """Rows are dataclasses: attributes, plus ``row["field"]`` and :meth:`to_dict`."""

    def __getitem__(self, name: str) -> Any:
        try:
            return getattr(self, name)
        except AttributeError:
            raise KeyError(name) from None

    def to_dict(self) -> dict[str, Any]:
        """The row's fields as a dict (nested dataclasses too), by their Python names."""
        out: dict[str, Any] = asdict(self)  # type: ignore[call-overload]
        return out
