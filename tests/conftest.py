"""Shared test set-up: CPU runtime environment before MindSpore loads, tiny fixtures."""

from engine.runtime import configure_process_env

# Must run before any test module imports mindspore (oneDNN reads it at load time).
configure_process_env("CPU")
