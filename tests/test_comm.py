"""CountingComm on COMM_SELF (serial): every call counts its buffer's size
once per side, by category; and the metrics writers."""

import csv
import json

import numpy as np
import pytest

from mpisgd import wire


def test_counting_comm_counts_buffers_by_category():
    from mpi4py import MPI

    from mpisgd.comm import CountingComm

    comm = CountingComm(MPI.COMM_SELF.Dup())
    try:
        msg = wire.encode(0.5, 1.0, np.array([1, 4], np.int32), np.array([2.0, 3.0]), 100)
        request = comm.Isend(msg, 0, 7, "violation")
        buf, src, tag = comm.recv_bytes_message(0, 7, "violation")
        comm.wait(request)
        np.testing.assert_array_equal(buf, msg)
        assert (src, tag) == (0, 7)
        z = np.arange(5.0)
        out = np.empty_like(z)
        comm.Allreduce(z, out, MPI.SUM, "full_sync")
        np.testing.assert_array_equal(out, z)
        counters = comm.counters()
        assert counters["sent"]["violation"] == {"messages": 1, "bytes": wire.model_nbytes(2, 100)}
        assert counters["received"]["violation"] == {"messages": 1, "bytes": 16 + 24}
        assert counters["sent"]["full_sync"] == {"messages": 1, "bytes": 40}
        assert counters["received"]["full_sync"] == {"messages": 1, "bytes": 40}
        assert counters["sent"]["control"] == {"messages": 0, "bytes": 0}
        assert comm.bytes_by_category()["violation"] == 40
        assert comm.probe(block=False) is None
    finally:
        comm.comm.Free()


def test_timeline_and_report_writers(tmp_path):
    from mpisgd.metrics import Timeline, read_report, write_report

    a, b = Timeline(), Timeline()
    a.record(10, 3, 1.5, {"violation": 40})
    b.record(10, 2, 0.5, {"violation": 12, "control": 8})
    total = Timeline.summed([a.as_array(), b.as_array()])
    path = tmp_path / "timeline.csv"
    total.write(path)
    rows = list(csv.DictReader(path.open()))
    assert rows == [{"round": "10", "errors": "5", "loss": "2.0", "bytes_total": "60", "bytes_violation": "52",
                     "bytes_balance_request": "0", "bytes_balance_reply": "0", "bytes_balance_result": "0",
                     "bytes_full_sync": "0", "bytes_control": "8"}]
    write_report(tmp_path / "report.json", {"x": np.int64(3), "y": np.arange(2), "z": {"w": np.float64(0.5)}})
    assert read_report(tmp_path / "report.json") == {"x": 3, "y": [0, 1], "z": {"w": 0.5}}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_run_config_is_checked():
    from mpisgd.errors import MpisgdError
    from mpisgd.runner import RunConfig

    with pytest.raises(MpisgdError, match="mode"):
        RunConfig(mode="eventually")
    with pytest.raises(MpisgdError, match="poll_rows"):
        RunConfig(poll_rows=0)
    assert json.dumps(RunConfig().as_dict())
