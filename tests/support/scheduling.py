"""Which test files dev/test.sh starts first (tests/conftest.py orders them)."""

# pytest-xdist hands each worker whole files (dev/test.sh: --dist loadfile) in collection
# order (--no-loadscope-reorder; xdist's own reorder puts files with many tests first, which
# left the single-test files of several minutes for last, one worker waiting on them): the
# files that take minutes go first, longest first, so that both workers end together.
# Measured totals, Intel Xeon, 2 cores: 495 s (test_train) down to ~60 s. A scheduling hint
# only; a file not named here keeps its place after them.
SLOWEST_FILES = (
    "tests/e2e/test_train.py",
    "tests/tools/chip_check/test_main.py",
    "tests/e2e/test_distributed.py",
    "tests/tools/selftest/test_report.py",
    "tests/e2e/test_run_safety.py",
    "tests/tools/chip_check/test_backend.py",
    "tests/engine/training/test_pynative_training.py",
    "tests/engine/inference/test_exported.py",
    "tests/e2e/test_pretrained_start.py",
    "tests/engine/runtime/test_kernel_choice.py",
    "tests/engine/runtime/test_fusion.py",
    "tests/e2e/test_eval_predict.py",
    "tests/engine/training/test_accumulate.py",
    "tests/e2e/test_accumulate_train.py",
    "tests/engine/inference/test_export_command.py",
    "tests/models/test_loss.py",
    "tests/engine/training/test_recompute.py",
    "tests/e2e/test_multiscale_train.py",
)
