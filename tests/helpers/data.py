"""The real data sets (../shared/data beside the checkout, never copied into it)."""

import os

import pytest

from helpers.env import ROOT

DATA = ROOT.parent / "shared" / "data"


def real_data(*parts):
    """The path DATA/parts...; skips the test with the reason where it is absent,
    and fails it instead under CI (CI=true), where the data must be there."""
    path = DATA.joinpath(*parts)
    if not path.exists():
        message = f"real data {path} absent"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}, and CI=true: CI must run the real-data tests")
        pytest.skip(message)
    return path
