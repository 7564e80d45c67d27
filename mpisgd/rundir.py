"""The outputs of a run (``fit -o``, ``train --out``, ``simulate --out``):
never replaced by accident, and, after ``train``, completed with what the
runner does not know: how the shards were preprocessed and the final
model's held-out score."""

import os

from mpisgd.errors import MpisgdError

RUN_FILES = ("model.h5", "report.json")


def refuse_to_replace(out, overwrite=False, files=RUN_FILES, allow="--overwrite"):
    """Before any work: an error if the directory ``out`` already holds one of
    ``files`` of an earlier run (``files=None``: ``out`` is itself the output
    file), unless ``overwrite``. The earlier run stays untouched."""
    paths = [out] if files is None else [os.path.join(out, name) for name in files]
    existing = [p for p in paths if os.path.exists(p)]
    if existing and not overwrite:
        raise MpisgdError(
            f"{existing[0]} already exists (an earlier run): pass {allow} to replace it, "
            "or choose another output"
        )


def start_train_run(out, overwrite, shards=(), test=None):
    """Rank 0 before ``mpisgd train`` learns: refuse an ``out`` holding a run
    (unless ``overwrite``), shards preprocessed differently, and a ``test``
    set that is not one for them (``evaluation.check_test_set``). Returns the
    shards' preprocessing record."""
    from mpisgd.data.shard import preprocessing_of
    from mpisgd.evaluation import check_test_set

    refuse_to_replace(out, overwrite, allow="--overwrite (or --resume)")
    preprocessing = preprocessing_of(shards)
    if test is not None:
        check_test_set(test, preprocessing)
    return preprocessing


def complete_train_run(out, report, preprocessing, test=None):
    """Rank 0 after ``mpisgd train``: copy the shards' ``preprocessing`` record
    into out/model.h5 (their label mapping becomes the model's classes), score
    the final model on ``test`` (report["heldout"]: examples, loss, error, cost,
    data) and rewrite report.json."""
    from mpisgd.evaluation import score
    from mpisgd.metrics import write_report
    from mpisgd.model import LinearModel

    path = os.path.join(out, "model.h5")
    model = LinearModel.load(path)
    if preprocessing:
        model.preprocessing = dict(preprocessing)
        mapping = preprocessing["label_mapping"]
        if model.is_classifier and mapping:  # input label of −1, of +1
            back = {int(v): k for k, v in mapping.items()}
            model.meta["classes"] = [_number(back[-1]), _number(back[1])]
        model.save(path)
    if test is not None:
        report["heldout"] = score(model, test, option="--test")
        write_report(os.path.join(out, "report.json"), report)


def _number(text):
    value = float(text)
    return int(value) if value.is_integer() else value
