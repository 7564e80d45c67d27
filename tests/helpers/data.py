"""The real data sets (../shared/data beside the checkout, never copied into it), and
a text source read in small chunks."""

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


def small_chunks(source, chunk_bytes=2048):
    """The text ``source`` read in chunks of ``chunk_bytes``: many blocks of rows."""
    from mpisgd.data import libsvm

    args = (source.path, source.zero_based, source.n_features)
    source.chunks = lambda start=0, stop=None: libsvm.iter_parsed(
        *args, start, stop, source.binary, chunk_bytes=chunk_bytes)
    source.counts = lambda start=0, stop=None: libsvm.iter_counted(
        *args, start, stop, source.binary, chunk_bytes=chunk_bytes)
    return source
