"""User errors are their own type and shown as one line; names a user controls are escaped (issue 24)."""

from __future__ import annotations

import pytest

from velobins_common.errors import OptionError, OutputError, UserError, one_line, printable


def test_user_errors_are_one_type_that_validation_code_still_catches_as_value_errors() -> None:
    for exc in (OptionError("--seconds", "must be finite"), OutputError("/x", "exists")):
        assert isinstance(exc, UserError) and isinstance(exc, ValueError)
    assert str(OptionError("--seconds", "must be finite, got nan")) == "--seconds: must be finite, got nan"
    with pytest.raises(ValueError):
        raise OutputError("/x", "exists")


def test_names_are_escaped_onto_one_line() -> None:
    crafted = "x\n/**/velobins_ekf:\n  ros__parameters: {}\r\x1b[2J\u2028"
    assert "\n" not in printable(crafted) and "\x1b" not in printable(crafted) and "\u2028" not in printable(crafted)
    assert printable(crafted).startswith("x\\n/**/velobins_ekf:\\n")
    assert printable("B9_trefoil/rep 1 — ok") == "B9_trefoil/rep 1 — ok"  # ordinary text unchanged
    assert one_line("a\n  b\tc") == "a b c"
