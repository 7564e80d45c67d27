"""``mpisgd plot``: figures (PNG, matplotlib) of a protocol sweep or of runs.

    mpisgd plot runs/reproduce/results.json --out runs/reproduce/figures
    mpisgd plot runs/sim/timeline.csv runs/train/timeline.csv --out runs/cmp

For a sweep (``bench/reproduce/reproduce.py``'s results.json): per experiment, Kamp et
al.'s Figure 1 (cumulative online error against messages, one point per
configuration, median over seeds with the range as bars) in messages and in
bytes, and the cumulative error and messages over rounds of one seed. For
timeline.csv files (or run directories holding one): cumulative error and
bytes over rounds, one line per run.
"""

HELP = "draw figures (PNG): Figure 1 of Kamp et al. from a sweep, or error over rounds from timelines"

ROUND_LABELS = {
    "disjunction": ["none", "static b=8", "static b=128", "dynamic Δ=3 b=1", "dynamic Δ=0.3 b=1", "central"],
    "disjunction-nodrift": ["none", "static b=8", "static b=128", "dynamic Δ=3 b=1", "central"],
    "neuralnet": ["none", "static b=8", "static b=128", "dynamic Δ=0.05 b=1", "dynamic Δ=0.5 b=1", "central"],
    "neuralnet-unit": ["none", "static b=8", "static b=128", "dynamic Δ=2 b=1", "dynamic Δ=5 b=1", "central"],
    "disjunction-beyond": ["none", "static b=8", "paper Δ=3 b=1", "auto b=8", "auto b=8 q8", "fda Θ=1 b=8 q8"],
    "stationary": ["none", "static b=8", "static b=2 (Dekel)", "dynamic Δ_t=0.2/√t b=1", "dynamic Δ=0.2 b=1", "central"],
}


def add_arguments(parser):
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="a sweep's results.json, or timeline.csv files / run directories")
    parser.add_argument("--out", metavar="DIR", default="runs/figures", help="directory for the PNG files")
    parser.add_argument("--seed", type=int, default=None, help="sweep: the seed of the over-rounds figures")


def run(args):
    import json
    import os

    from mpisgd.errors import MpisgdError

    try:
        import matplotlib  # noqa: F401  (the plot extra)
    except ImportError:
        raise MpisgdError("plot draws with matplotlib, which is not installed: "
                          "pip install 'mpisgd[plot]'") from None
    from mpisgd import plots

    os.makedirs(args.out, exist_ok=True)
    written = []
    first = args.inputs[0]
    if first.endswith(".json"):
        if len(args.inputs) != 1:
            raise MpisgdError("plot: give one sweep results.json at a time")
        try:
            with open(first, encoding="utf-8") as f:
                rows = json.load(f)["rows"]
        except (OSError, ValueError, KeyError) as exc:
            raise MpisgdError(f"{first}: not a sweep results file ({exc})") from None
        experiments = sorted({r["experiment"] for r in rows})
        for exp in experiments:
            for unit in ("messages", "bytes"):
                path = os.path.join(args.out, f"{exp}-figure1-{unit}.png")
                plots.figure1(rows, exp, path, unit)
                written.append(path)
            labels = ROUND_LABELS.get(exp) or sorted({r["label"] for r in rows if r["experiment"] == exp})[:6]
            path = os.path.join(args.out, f"{exp}-error-over-rounds.png")
            plots.error_over_rounds(rows, exp, path, labels, args.seed)
            written.append(path)
    else:
        paths = []
        for p in args.inputs:
            p = os.path.join(p, "timeline.csv") if os.path.isdir(p) else p
            if not os.path.exists(p):
                raise MpisgdError(f"plot: {p} not found")
            paths.append(p)
        path = os.path.join(args.out, "error-over-rounds.png")
        plots.timelines(paths, path, names=[os.path.basename(os.path.dirname(os.path.abspath(p))) for p in paths])
        written.append(path)
    for path in written:
        print(f"mpisgd plot: wrote {path}")
    return 0
