"""Countries by their English names (ISO 3166-1 alpha-2 codes, as the provider logs them).

The names are the Unicode CLDR's, through Babel: a well-kept source, not a table of our own.
A code the CLDR does not know, and "-" (the provider did not know the country), is shown
as it was logged.
"""

from __future__ import annotations

import functools
import re

_CODE = re.compile(r"[A-Za-z]{2}")


@functools.cache
def _territories() -> dict[str, str]:
    from babel import Locale

    return dict(Locale("en").territories)


def country_name(code: object) -> str:
    """The English name of ``code`` ("DE" -> "Germany"), or the code itself when unknown."""
    text = "-" if code is None else str(code)
    if _CODE.fullmatch(text) is None:
        return text
    return _territories().get(text.upper(), text)
