"""The README's "Using a cluster's MPI" path: Debian's Open MPI and .venv-mpi,
mpi4py built from source against it (.ci/system_mpi.sh runs the README's
lines in CI before `make test`). Skipped with the reason where .venv-mpi is
missing; under CI (CI=true) that is a failure."""

import importlib.metadata
import json
import subprocess

import pytest
from helpers.env import ROOT, job_env
from helpers.system_mpi import ROOT_ENV, VENV, SystemMpiUnavailable, system_mpi_python, unavailable


def readme_block():
    text = (ROOT / "README.md").read_text()
    block = text.split("<!-- cluster-mpi:", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    return block.replace("\\\n", " ")


def test_readme_installs_every_runtime_dependency_but_the_mpich_wheel():
    """The README installs with --no-deps, so it must name the dependencies itself."""
    lines = [line.split() for line in readme_block().splitlines()]
    named = {word for line in lines if "install" in line and "--no-deps" not in line
             and "--no-binary=mpi4py" not in line and "apt-get" not in line
             for word in line[line.index("install") + 1:] if not word.startswith("-")}
    # pyproject.toml's dependencies for this Python (a marker may leave one out), as this
    # (editable) install of mpisgd records them.
    from packaging.requirements import Requirement

    deps = [Requirement(d) for d in importlib.metadata.requires("mpisgd")]
    wanted = {d.name.lower() for d in deps if d.marker is None or d.marker.evaluate({"extra": ""})} - {"mpich", "mpi4py"}
    assert named == wanted, "README's cluster-MPI pip line and pyproject.toml disagree"
    assert "--no-binary=mpi4py" in readme_block() and "MPICC=" in readme_block()


@pytest.fixture(scope="module")
def python():
    try:
        return system_mpi_python()
    except SystemMpiUnavailable as exc:
        unavailable(str(exc))


def test_venv_mpi4py_is_built_against_open_mpi_without_the_mpich_wheel(python):
    probe = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m, mpi4py.MPI as MPI;"
         "print(sorted(d.metadata['Name'].lower() for d in m.distributions()));"
         "print(MPI.__file__)"],
        capture_output=True, text=True, timeout=60, env=job_env(**ROOT_ENV))
    assert probe.returncode == 0, probe.stderr
    installed, module = probe.stdout.splitlines()[:2]
    assert "'mpich'" not in installed and "'mpi4py'" in installed
    # A binary wheel ships MPI.mpich.*.so and MPI.openmpi.*.so; a source build one
    # MPI.*.so linked to the libmpi of the mpicc it was built with.
    assert ".openmpi." not in module and ".mpich." not in module, module
    libs = subprocess.run(["ldd", module], capture_output=True, text=True, timeout=30).stdout
    assert "libmpi.so.40" in libs, libs  # Open MPI's soname (MPICH's is libmpi.so.12)


def test_mpirun_runs_a_two_rank_training_job(python, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        ["mpirun", "-n", "2", "--oversubscribe", str(python), "-m", "mpi4py", "-m", "mpisgd",
         "train", "--synthetic", "disjunction", "--rounds", "300", "--protocol", "static",
         "--period", "4", "--quiet", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=job_env(**ROOT_ENV))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["configuration"]["ranks"] == 2
    assert report["online"]["examples"] == 2 * 300
    assert report["communication"]["total_bytes"] > 0
    assert str(VENV) in str(python)
